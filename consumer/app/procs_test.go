package app

import (
	"flag"
	"runtime"
	"testing"
)

func TestMaxProcs(t *testing.T) {
	orig := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(orig) })
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"one partition: one processor", []string{"-instance-id=consumer-3"}, 1},
		{"several partitions: one each", []string{"-kafka.partitions=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63"}, min(64, usableProcs)},
		{"two partitions", []string{"-kafka.partitions=4,7"}, min(2, usableProcs)},
		{"the flag wins over the partitions", []string{"-instance-id=consumer-3", "-consumer.max-procs=3"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GOMAXPROCS(orig)
			cfg := parse(t, tc.args...)
			got, err := MaxProcs(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || runtime.GOMAXPROCS(0) != tc.want {
				t.Fatalf("MaxProcs = %d, GOMAXPROCS %d; want %d", got, runtime.GOMAXPROCS(0), tc.want)
			}
		})
	}
	t.Run("the environment wins", func(t *testing.T) {
		runtime.GOMAXPROCS(orig)
		t.Setenv("GOMAXPROCS", "7")
		if got, err := MaxProcs(parse(t, "-instance-id=consumer-3")); err != nil || got != 0 || runtime.GOMAXPROCS(0) != orig {
			t.Fatalf("MaxProcs = %d, %v with GOMAXPROCS set; GOMAXPROCS now %d, want it left at %d", got, err, runtime.GOMAXPROCS(0), orig)
		}
	})
	t.Run("a negative flag is refused", func(t *testing.T) {
		cfg := parse(t, "-instance-id=consumer-3", "-consumer.max-procs=-1")
		if err := cfg.Validate(); err == nil {
			t.Fatal("Validate accepted -consumer.max-procs=-1")
		}
	})
}

func parse(t *testing.T, args ...string) Config {
	t.Helper()
	var cfg Config
	fs := flag.NewFlagSet("ferry-consumer", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return cfg
}
