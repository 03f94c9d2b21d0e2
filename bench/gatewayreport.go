package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// stageTargets appends the rows of issues 13 and 14 to the targets table,
// which targets leaves open (it ends with its last row).
func (r *report) stageTargets(w writer) {
	r.gatewayTargets(w)
	r.remoteWriteTargets(w)
}

// gatewayTargets writes issue 13's two target rows.
func (r *report) gatewayTargets(w writer) {
	g := r.Gateway
	if g == nil {
		return
	}
	what := fmt.Sprintf("gateway ≥ 70%% of a plain franz-go producer's samples/s, %d clients × %s samples/request",
		g.Cfg.Clients, fmtNum(float64(g.Cfg.SamplesPerRequest)))
	med, lo, hi := g.median(gatewayRound.ratio)
	if math.IsNaN(med) {
		w("| %s | not measured | **miss** |\n", what)
	} else {
		cpu, _, _ := g.median(gatewayRound.cpuRatio)
		w("| %s | %s (median of %d rounds, %s–%s; %s by CPU) | %s (%+.0f points) |\n", what, pct(med), len(g.Rounds),
			pct(lo), pct(hi), pct(cpu), passMiss(med >= targetGatewayRatio), (med-targetGatewayRatio)*100)
	}
	what = fmt.Sprintf("gateway request p99 < 50 ms at %.0f%% of its capacity", 100*g.Cfg.LatencyFraction)
	l := g.Latency
	if l == nil || l.Err != "" || l.Lat.N == 0 {
		w("| %s | not measured | **miss** |\n", what)
		return
	}
	p99 := l.Lat.P99.Seconds()
	w("| %s | p99 %s at %s requests/s (%s samples/s), %s requests | %s (%s) |\n", what, fmtSeconds(p99),
		fmtF(l.RequestRate, 1), fmtNum(l.RequestRate*float64(g.Cfg.SamplesPerRequest)), fmtNum(float64(l.Lat.N)),
		passMiss(p99 < targetGatewayP99 && l.Failed == 0), byHowMuch(p99, targetGatewayP99, fmtSeconds))
}

// remoteWriteTargets writes issue 14's target row.
func (r *report) remoteWriteTargets(w writer) {
	rw := r.RemoteWrite
	if rw == nil {
		return
	}
	what := "pipeline(remote-write → Prometheus) ≥ 80% of the samples/s the same Prometheus ingests from a plain remote-write client at full speed"
	med, lo, hi := rw.median(rwRound.ratio)
	if math.IsNaN(med) {
		w("| %s | not measured | **miss** |\n", what)
		return
	}
	tmed, tlo, thi := rw.median(rwRound.tenantRatio)
	w("| %s | %s (median of %d rounds, %s–%s); against a plain client with the pipeline's concurrency (a stream per tenant): %s (%s–%s) | %s (%+.0f points) |\n",
		what, pct(med), len(rw.Rounds), pct(lo), pct(hi), pct(tmed), pct(tlo), pct(thi),
		passMiss(med >= targetRemoteWriteRatio), (med-targetRemoteWriteRatio)*100)
}

func (r *report) gatewaySection(w writer) {
	g := r.Gateway
	if g == nil {
		return
	}
	c := g.Cfg
	w("\n### Gateway: remote write in, Kafka out\n\n")
	if g.Err != "" {
		w("FAILED: %s\n\n", oneLine(g.Err))
	}
	flags := "default flags"
	if strings.TrimSpace(c.Args) != "" {
		flags = "flags `" + strings.Join(strings.Fields(c.Args), " ") + "`"
	}
	w("One `ferry-gateway` process (%s, a fresh %d-partition topic) driven by %d remote-write 1.0 clients in the harness over HTTP/1.1 keep-alive, "+
		"each with one request in flight (a closed loop, like a Prometheus queue shard), spread over %d tenants; each request carries %s series of about 8 labels "+
		"with one sample each: %s B of protobuf, %s B snappy-compressed. The ceiling is a plain franz-go producer in the harness producing the same records "+
		"(key = tenant, value = the uncompressed request) with the gateway's producer settings, as fast as it can with up to 64 MiB buffered. "+
		"Each round measures the ceiling, then the gateway, each over a %s window after %s of warm-up; a sample counts when its request was answered 2xx "+
		"(the gateway answers after Kafka acknowledged the record) or its record was acknowledged. CPU is utime+stime per million samples: the gateway process's, "+
		"the clients' (the harness), and for the ceiling its producer's (the harness); \"by CPU\" is the ceiling producer's CPU per sample over the gateway process's.\n\n",
		flags, c.Partitions, c.Clients, c.Tenants, fmtNum(float64(c.SamplesPerRequest)), fmtNum(float64(g.RawBytes)), fmtNum(float64(g.BodyBytes)), c.Duration, c.Warmup)
	w("| round | ceiling samples/s | ceiling CPU s / M samples | gateway samples/s | gateway requests/s | gateway CPU s / M samples | clients CPU s / M samples | failed requests | gateway / ceiling | by CPU |\n")
	w("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for i, rd := range g.Rounds {
		if rd.Ceiling.Err != "" || rd.Gateway.Err != "" {
			w("| %d | FAILED: %s | | | | | | | | |\n", i+1, oneLine(rd.Ceiling.Err+" "+rd.Gateway.Err))
			continue
		}
		failed := fmtNum(float64(rd.Gateway.Failed))
		if rd.Gateway.FirstErr != "" {
			failed += " (" + oneLine(rd.Gateway.FirstErr) + ")"
		}
		w("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", i+1,
			fmtNum(rd.Ceiling.samplesPerSec()), fmtF(rd.Ceiling.cpuPerMSamples(rd.Ceiling.HarnessCPU), 2),
			fmtNum(rd.Gateway.samplesPerSec()), fmtF(rd.Gateway.requestsPerSec(), 1),
			fmtF(rd.Gateway.cpuPerMSamples(rd.Gateway.ProcCPU), 2), fmtF(rd.Gateway.cpuPerMSamples(rd.Gateway.HarnessCPU), 2),
			failed, pct(rd.ratio()), pct(rd.cpuRatio()))
	}
	r.otlpSection(w)
	if l := g.Latency; l != nil {
		w("\nLatency: requests sent open-loop at %.0f%% of the gateway's median capacity (%s requests/s), paced from the start, on up to %d concurrent connections; "+
			"each request is timed from when it was due to its answer, so queueing behind late requests counts; every request sent is waited for. %s window after %s of warm-up.\n\n",
			100*l.Fraction, fmtF(l.RequestRate, 1), 4*c.Clients, l.Window, c.Warmup)
		if l.Err != "" {
			w("FAILED: %s\n", oneLine(l.Err))
		} else {
			w("| rate | requests timed | failed | p50 | p90 | p99 | max | of which Kafka's ack (`%s`, whole run) p50 / p99 | gateway CPU, cores |\n|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n", produceMetric)
			w("| %s requests/s (%s samples/s) | %s | %s | %s | %s | %s | %s | %s / %s | %s |\n", fmtF(l.RequestRate, 1),
				fmtNum(l.RequestRate*float64(c.SamplesPerRequest)), fmtNum(float64(l.Lat.N)), fmtNum(float64(l.Failed)),
				fmtSeconds(l.Lat.P50.Seconds()), fmtSeconds(l.Lat.P90.Seconds()), fmtSeconds(l.Lat.P99.Seconds()), fmtSeconds(l.Lat.Max.Seconds()),
				fmtSeconds(l.ProduceP50), fmtSeconds(l.ProduceP99), fmtF(perSec(l.GatewayCPU.Seconds(), l.Elapsed), 2))
		}
	}
	if len(g.Profile) > 0 {
		w("\nWhere the gateway's CPU goes: Go CPU profile (`/debug/pprof/profile`, `-server.enable-pprof`) over %.0f s of the last round's gateway window, `go tool pprof -top` (self) and `-top -cum`:\n\n", g.ProfileSeconds)
		head := "      flat  flat%%   sum%%        cum   cum%%\n"
		w("```\n"+head+"%s\n```\n\n```\n"+head+"%s\n```\n", strings.Join(g.Profile, "\n"), strings.Join(g.ProfileCum, "\n"))
	}
}

func (r *report) remoteWriteSection(w writer) {
	rw := r.RemoteWrite
	if rw == nil {
		return
	}
	c := rw.Cfg
	w("\n### Remote-write backend: pipeline(remote-write → Prometheus)\n\n")
	if rw.Err != "" {
		w("FAILED: %s\n\n", oneLine(rw.Err))
	}
	w("The receiver is a real Prometheus (%s) started with `--web.enable-remote-write-receiver`, no scrape targets and a fresh storage directory for every run. "+
		"The data: %d tenants × %s series (about 8 labels each) × %d samples 15 s apart, in %s requests of %s series (%s samples, %.0f MB of protobuf, %.0f MB snappy-compressed). "+
		"**Plain client**: the harness posts the snappy bodies to `/api/v1/write` on concurrent streams, each sending its requests in order (a series must not go back in time) "+
		"and each request as soon as the previous was answered: at full speed one stream per series block of a tenant (their series are disjoint), "+
		"and with the pipeline's concurrency one stream per tenant (the pusher keeps a tenant's requests in order). **Pipeline**: the same requests, produced beforehand as records (key = tenant, tenant t on partition t mod %d) "+
		"are replayed by %d `ferry-consumer` processes (fresh group) into `ferry-pusher -pusher.backend=remote-write -remote-write.send-tenant=false`, which forwards each record's bytes as they came from Kafka. "+
		"The rate is the receiver's own: `%s` scraped every 100 ms, from the scrape that first saw 10 %% of the samples appended to the first that saw 90 %% "+
		"(the process start and consumer-group join are outside it); \"whole\" runs from the first request, or the consumers' start, to all appended. "+
		"Each round starts with a different run; the target is against the full-speed client.\n\n",
		rw.Version, c.Tenants, fmtNum(float64(c.SeriesPerTenant)), c.Steps, fmtNum(float64(rw.Records)), fmtNum(float64(c.SamplesPerRequest)),
		fmtNum(float64(rw.Samples)), float64(rw.RawBytes)/1e6, float64(rw.BodyBytes)/1e6, c.Partitions, c.Partitions, appendedMetric)
	w("| round | run | samples/s (10–90 %%) | whole run samples/s | time | Prometheus CPU s / M samples | client or consumers + pusher CPU s / M samples | pipeline ÷ this run | note |\n")
	w("|--:|---|--:|--:|--:|--:|--:|--:|---|\n")
	for i, rd := range rw.Rounds {
		for j, run := range []rwRun{rd.Direct, rd.Tenant, rd.Pipeline} {
			name, other, ratio := fmt.Sprintf("plain client, a stream per series block (%d)", rw.Streams), run.HarnessCPU, pct(rd.ratio())
			switch j {
			case 1:
				name, ratio = fmt.Sprintf("plain client, a stream per tenant (%d)", c.Tenants), pct(rd.tenantRatio())
			case 2:
				name, other, ratio = "pipeline", run.ConsumerCPU+run.PusherCPU, ""
			}
			if run.Err != "" {
				w("| %d | %s | | | | | | | FAILED: %s |\n", i+1, name, oneLine(run.Err))
				continue
			}
			per := func(d time.Duration) string {
				if d <= 0 {
					return "–"
				}
				return fmtF(d.Seconds()/(float64(run.Samples)/1e6), 2)
			}
			w("| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", i+1, name, fmtNum(run.samplesPerSec()),
				fmtNum(perSec(float64(run.Samples), run.Elapsed)), run.Elapsed.Round(10*time.Millisecond),
				fmtF(run.promCPUPerMSamples(), 2), per(other), ratio, oneLine(run.Check))
		}
	}
}
