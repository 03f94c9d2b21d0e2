package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// openTestDB opens a bare TSDB with the options the Store uses that matter
// for the errors provoked here.
func openTestDB(t *testing.T, oooWindow time.Duration) *tsdb.DB {
	t.Helper()
	opts := tsdb.DefaultOptions()
	opts.EnableExemplarStorage = true
	opts.MaxExemplars = 100
	opts.OutOfOrderTimeWindow = oooWindow.Milliseconds()
	db, err := tsdb.Open(t.TempDir(), nil, nil, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// appendErr commits a float sample at first, then appends one at then and
// returns the error of that second append.
func appendErr(t *testing.T, db *tsdb.DB, first, then int64, v1, v2 float64) error {
	t.Helper()
	ls := labels.FromStrings("__name__", "m")
	app := db.AppenderV2(context.Background())
	if _, err := app.Append(0, ls, 0, first, v1, nil, nil, storage.AOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	app = db.AppenderV2(context.Background())
	defer func() { _ = app.Rollback() }()
	_, err := app.Append(0, ls, 0, then, v2, nil, nil, storage.AOptions{})
	return err
}

// exemplarErr commits a float sample with an exemplar at ts 1000, then
// appends the exemplar e to the same series and returns its error.
func exemplarErr(t *testing.T, db *tsdb.DB, e exemplar.Exemplar) error {
	t.Helper()
	ls := labels.FromStrings("__name__", "m")
	app := db.AppenderV2(context.Background())
	if _, err := app.Append(0, ls, 0, 1000, 1, nil, nil, storage.AOptions{
		Exemplars: []exemplar.Exemplar{{Labels: labels.FromStrings("trace_id", "a"), Value: 1, Ts: 1000, HasTs: true}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	app = db.AppenderV2(context.Background())
	defer func() { _ = app.Rollback() }()
	_, err := app.(storage.ExemplarAppenderV2).AppendExemplars(0, ls, []exemplar.Exemplar{e})
	var partial *storage.AppendPartialError
	if errors.As(err, &partial) && len(partial.ExemplarErrors) == 1 {
		return partial.ExemplarErrors[0].Err
	}
	return err
}

func TestClassify(t *testing.T) {
	const hour = int64(time.Hour / time.Millisecond)
	cases := []struct {
		name   string
		err    func(t *testing.T) error
		client bool
		code   string
	}{
		// Provoked with a real TSDB.
		{"out of order", func(t *testing.T) error {
			return appendErr(t, openTestDB(t, 0), 1000, 500, 1, 1)
		}, true, "out_of_order"},
		{"out of bounds", func(t *testing.T) error {
			// Older than half a block range behind the head's newest sample.
			return appendErr(t, openTestDB(t, 0), 10*hour, 10*hour-2*hour, 1, 1)
		}, true, "out_of_bounds"},
		{"too old for the out-of-order window", func(t *testing.T) error {
			return appendErr(t, openTestDB(t, 10*time.Minute), 10*hour, 9*hour, 1, 1)
		}, true, "too_old"},
		{"duplicate timestamp", func(t *testing.T) error {
			return appendErr(t, openTestDB(t, 0), 1000, 1000, 1, 2)
		}, true, "duplicate_timestamp"},
		{"invalid histogram", func(t *testing.T) error {
			db := openTestDB(t, 0)
			app := db.AppenderV2(context.Background())
			defer func() { _ = app.Rollback() }()
			h := &histogram.Histogram{Count: 5, PositiveSpans: []histogram.Span{{Length: 1}}, PositiveBuckets: []int64{1}}
			_, err := app.Append(0, labels.FromStrings("__name__", "h"), 0, 1000, 0, h, nil, storage.AOptions{})
			return err
		}, true, "invalid_histogram"},
		{"contradictory histogram", func(t *testing.T) error {
			_, _, err := convertHistogram(&prompb.Histogram{
				Count: &prompb.Histogram_CountInt{CountInt: 1}, ZeroCount: &prompb.Histogram_ZeroCountFloat{ZeroCountFloat: 1},
			})
			return err
		}, true, "invalid_histogram"},
		{"empty label set", func(t *testing.T) error {
			db := openTestDB(t, 0)
			app := db.AppenderV2(context.Background())
			defer func() { _ = app.Rollback() }()
			_, err := app.Append(0, labels.EmptyLabels(), 0, 1000, 1, nil, nil, storage.AOptions{})
			return err
		}, true, "invalid_sample"},
		{"out-of-order exemplar", func(t *testing.T) error {
			return exemplarErr(t, openTestDB(t, 0), exemplar.Exemplar{Labels: labels.FromStrings("trace_id", "b"), Value: 1, Ts: 500, HasTs: true})
		}, true, "exemplar_out_of_order"},
		{"exemplar labels too long", func(t *testing.T) error {
			return exemplarErr(t, openTestDB(t, 0), exemplar.Exemplar{Labels: labels.FromStrings("trace_id", strings.Repeat("x", 200)), Value: 1, Ts: 2000, HasTs: true})
		}, true, "exemplar_labels_too_long"},
		{"exemplar with a duplicate label name", func(t *testing.T) error {
			return exemplarErr(t, openTestDB(t, 0), exemplar.Exemplar{Labels: labels.FromStrings("a", "1", "a", "2"), Value: 1, Ts: 2000, HasTs: true})
		}, true, "exemplar_invalid"},
		{"exemplar for a series without samples", func(t *testing.T) error {
			db := openTestDB(t, 0)
			_ = appendErr(t, db, 1000, 2000, 1, 1)
			app := db.AppenderV2(context.Background())
			defer func() { _ = app.Rollback() }()
			_, err := app.(storage.ExemplarAppenderV2).AppendExemplars(0, labels.FromStrings("__name__", "other"),
				[]exemplar.Exemplar{{Labels: labels.FromStrings("trace_id", "a"), Value: 1, Ts: 1000, HasTs: true}})
			return err
		}, true, "exemplar_unknown_series"},
		{"commit to a closed DB", func(t *testing.T) error {
			db := openTestDB(t, 0)
			app := db.AppenderV2(context.Background())
			if _, err := app.Append(0, labels.FromStrings("__name__", "m"), 0, 1000, 1, nil, nil, storage.AOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			return app.Commit()
		}, false, ""},

		// Pure mappings: errors of this package's limits, and TSDB errors
		// that the configuration used here never produces.
		{"series limit", func(*testing.T) error { return fmt.Errorf("%w: 3 series", errSeriesLimit) }, true, "series_limit"},
		{"too far in the future", func(*testing.T) error { return errTooFarInFuture }, true, "too_far_in_future"},
		{"invalid tenant", func(*testing.T) error { return validateTenant("..") }, true, "invalid_tenant"},
		{"histogram schema", func(*testing.T) error { return histogram.InvalidSchemaError(42) }, true, "invalid_histogram"},
		{"native histograms disabled", func(*testing.T) error { return storage.ErrNativeHistogramsDisabled }, true, "native_histograms_disabled"},
		{"start timestamp", func(*testing.T) error { return storage.ErrOutOfOrderST }, true, "invalid_start_timestamp"},
		{"duplicate exemplar", func(*testing.T) error { return storage.ErrDuplicateExemplar }, true, "exemplar_duplicate"},
		{"exemplars disabled", func(*testing.T) error { return storage.ErrExemplarsDisabled }, true, "exemplars_disabled"},
		{"closed DB", func(*testing.T) error { return tsdb.ErrClosed }, false, ""},
		{"not ready", func(*testing.T) error { return tsdb.ErrNotReady }, false, ""},
		{"appender closed", func(*testing.T) error { return tsdb.ErrAppenderClosed }, false, ""},
		{"WAL write", func(*testing.T) error { return fmt.Errorf("write to WAL: log samples: %w", fs.ErrClosed) }, false, ""},
		{"disk full", func(*testing.T) error {
			return fmt.Errorf("write to WAL: %w", &os.PathError{Op: "write", Path: "wal/00000001", Err: syscall.ENOSPC})
		}, false, ""},
		{"context canceled", func(*testing.T) error { return context.Canceled }, false, ""},
		{"deadline", func(*testing.T) error { return fmt.Errorf("push: %w", context.DeadlineExceeded) }, false, ""},
		{"shutting down", func(*testing.T) error { return backend.ErrShuttingDown }, false, ""},
		{"unknown", func(*testing.T) error { return errors.New("something nobody anticipated") }, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err(t)
			if err == nil {
				t.Fatal("the case did not produce an error")
			}
			c := classify(err)
			if c.client != tc.client || c.code != tc.code {
				t.Fatalf("classify(%v) = client %v, code %q; want client %v, code %q", err, c.client, c.code, tc.client, tc.code)
			}
			if c.client && c.what == "" {
				t.Errorf("client error %v has no description", err)
			}
			status, retryAfter := backend.Classify(requestError("push", err))
			want := backend.ClassServer
			if tc.client {
				want = backend.ClassClient
			}
			if status != want {
				t.Fatalf("backend.Classify(requestError(%v)) = %v, want %v", err, status, want)
			}
			if !tc.client && retryAfter <= 0 {
				t.Errorf("server error %v has no retry-after hint", err)
			}
			if !errors.Is(requestError("push", err), err) {
				t.Errorf("requestError(%v) does not wrap it", err)
			}
		})
	}
}

func TestRequestErrorRetryAfter(t *testing.T) {
	full := &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}
	if _, ra := backend.Classify(requestError("commit", full)); ra != diskFullRetryAfter {
		t.Errorf("disk full retry-after = %v, want %v", ra, diskFullRetryAfter)
	}
	if _, ra := backend.Classify(requestError("push", backend.ErrShuttingDown)); ra != backend.ErrShuttingDown.RetryAfter {
		t.Errorf("shutting down retry-after = %v, want the pusher's %v", ra, backend.ErrShuttingDown.RetryAfter)
	}
	if requestError("push", nil) != nil {
		t.Error("requestError(nil) is not nil")
	}
}
