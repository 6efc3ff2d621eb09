package connect

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// permanentError marks an error that retrying cannot fix (configuration, authentication,
// schema faults, a position that no longer exists).
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: the runtime fails the task instead of restarting it.
// Permanent(nil) is nil. The mark survives wrapping with %w.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// Permanentf is Permanent(fmt.Errorf(format, args...)).
func Permanentf(format string, args ...any) error {
	return &permanentError{err: fmt.Errorf(format, args...)}
}

// IsPermanent reports whether err, or an error it wraps, was marked Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// IsRetriable reports whether the runtime should retry after err: every non-nil error that is
// neither permanent nor a cancellation (context.Canceled means the task is being stopped).
func IsRetriable(err error) bool {
	return err != nil && !IsPermanent(err) && !errors.Is(err, context.Canceled)
}

// RecordError is one record that a sink or transform rejected permanently.
type RecordError struct {
	// Index is the record's index in the batch passed to Write.
	Index int
	Err   error
}

// WriteError is returned by Sink.Write when some records were rejected permanently and all the
// others were written.
type WriteError struct {
	Failed []RecordError
}

func (e *WriteError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d record(s) rejected", len(e.Failed))
	for i, f := range e.Failed {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e.Failed)-3)
			break
		}
		fmt.Fprintf(&b, "; record %d: %v", f.Index, f.Err)
	}
	return b.String()
}
