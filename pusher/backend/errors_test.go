package backend

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		err        error
		want       Class
		retryAfter time.Duration
	}{
		{
			name: "should be OK when there is no error",
			err:  nil,
			want: ClassOK,
		},
		{
			name: "should be a client error without a hint for a client error",
			err:  NewClientError("out of order sample"),
			want: ClassClient,
		},
		{
			name: "should be a client error for a client error wrapped with %w",
			err:  fmt.Errorf("tsdb: append: %w", NewClientError("out of order sample")),
			want: ClassClient,
		},
		{
			name: "should be a client error for a client error with a cause",
			err:  &ClientError{Reason: "series limit", Cause: errors.New("limit reached")},
			want: ClassClient,
		},
		{
			name:       "should pass on the retry-after of a server error",
			err:        &ServerError{Reason: "compaction running", RetryAfter: 3 * time.Second},
			want:       ClassServer,
			retryAfter: 3 * time.Second,
		},
		{
			name:       "should use the default retry-after for a server error without one",
			err:        &ServerError{Reason: "disk full"},
			want:       ClassServer,
			retryAfter: defaultRetryAfter,
		},
		{
			name:       "should find a wrapped server error",
			err:        fmt.Errorf("apply: %w", &ServerError{Reason: "slow disk", RetryAfter: time.Minute}),
			want:       ClassServer,
			retryAfter: time.Minute,
		},
		{
			name:       "should ask an overloaded sender to come back soon",
			err:        ErrOverloaded,
			want:       ClassServer,
			retryAfter: 100 * time.Millisecond,
		},
		{
			name:       "should ask a sender to wait out a shutdown",
			err:        ErrShuttingDown,
			want:       ClassServer,
			retryAfter: time.Second,
		},
		{
			name:       "should treat an unknown error as a server error",
			err:        errors.New("something nobody anticipated"),
			want:       ClassServer,
			retryAfter: defaultRetryAfter,
		},
		{
			name:       "should treat a cancelled context as a server error",
			err:        context.Canceled,
			want:       ClassServer,
			retryAfter: defaultRetryAfter,
		},
		{
			name:       "should treat a deadline as a server error",
			err:        fmt.Errorf("push: %w", context.DeadlineExceeded),
			want:       ClassServer,
			retryAfter: defaultRetryAfter,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, retryAfter := Classify(tc.err)
			if got != tc.want || retryAfter != tc.retryAfter {
				t.Errorf("Classify(%v) = %s, %s; want %s, %s", tc.err, got, retryAfter, tc.want, tc.retryAfter)
			}
		})
	}
}

func TestClientErrorUnwrapsItsCause(t *testing.T) {
	t.Parallel()
	cause := errors.New("limit reached")
	err := fmt.Errorf("wrapped: %w", &ClientError{Reason: "series limit", Cause: cause})
	if !errors.Is(err, cause) {
		t.Errorf("errors.Is(%v, cause) = false, want true", err)
	}
	if !IsClientError(err) {
		t.Errorf("IsClientError(%v) = false, want true", err)
	}
	if IsClientError(ErrOverloaded) {
		t.Error("IsClientError(ErrOverloaded) = true, want false")
	}
}
