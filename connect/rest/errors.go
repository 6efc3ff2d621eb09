package rest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluice-cdc/sluice/connect/runtime"
)

// apiError is an error answered with its status and Kafka Connect's error body:
// {"error_code": status, "message": "..."}.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return e.Message }

func errorf(status int, format string, args ...any) *apiError {
	return &apiError{Status: status, Message: fmt.Sprintf(format, args...)}
}

// badRequest is a 400 naming what is wrong.
func badRequest(format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, format, args...)
}

func notFound(format string, args ...any) *apiError {
	return errorf(http.StatusNotFound, format, args...)
}

// fromRuntime translates a runtime error into its status: every error path of the API goes
// through here or builds an apiError itself, so no internal error text reaches a client
// without a deliberate status.
func fromRuntime(err error) *apiError {
	var ae *apiError
	var ce *runtime.ConfigError
	var we *runtime.WaitError
	var wt *runtime.WaitTimeoutError
	var soe *runtime.SinkOffsetError
	var oe *runtime.OffsetError
	var sre *runtime.SnapshotRequestError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ce):
		return invalidConfig(ce)
	case errors.Is(err, runtime.ErrUnknownConnector):
		return notFound("%s", strings.TrimSuffix(err.Error(), ": "+runtime.ErrUnknownConnector.Error())+" not found")
	case errors.Is(err, runtime.ErrConnectorExists):
		return errorf(http.StatusConflict, "%v", err)
	case errors.Is(err, runtime.ErrDefinedInFile):
		return errorf(http.StatusConflict, "%v", err)
	case errors.Is(err, runtime.ErrNotStopped):
		return badRequest("%v", err)
	case errors.Is(err, runtime.ErrRebuildRunning), errors.Is(err, runtime.ErrNotRunning):
		return errorf(http.StatusConflict, "%v", err)
	case errors.Is(err, runtime.ErrNoRebuild), errors.Is(err, runtime.ErrNoSnapshots):
		return badRequest("%v", err)
	case errors.As(err, &sre):
		return badRequest("%v", sre.Err)
	case errors.As(err, &we):
		return badRequest("%s", we.Msg)
	case errors.As(err, &wt):
		return errorf(http.StatusGatewayTimeout, "timed out: %v", wt)
	case errors.As(err, &soe):
		return badRequest("offsets[%d]: %v", soe.Index, soe)
	case errors.As(err, &oe):
		return badRequest("offset: %v", oe.Err)
	case errors.Is(err, context.DeadlineExceeded):
		return errorf(http.StatusInternalServerError, "the request timed out")
	}
	return errorf(http.StatusInternalServerError, "%v", err)
}

// invalidConfig renders a configuration error the way Kafka Connect words it, one problem per
// line, each naming its key.
func invalidConfig(ce *runtime.ConfigError) *apiError {
	var b strings.Builder
	fmt.Fprintf(&b, "Connector configuration is invalid and contains the following %d error(s):", len(ce.Errors))
	for _, fe := range ce.Errors {
		b.WriteString("\n")
		b.WriteString(fe.Error())
	}
	b.WriteString("\nYou can also find the above list of errors at the endpoint `/connector-plugins/{connectorType}/config/validate`")
	return &apiError{Status: http.StatusBadRequest, Message: b.String()}
}
