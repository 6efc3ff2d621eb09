package runtime

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

// Kafka Connect's error stages, as the __connect.errors.stage header shows them.
const (
	stageKeyConverter    = "KEY_CONVERTER"
	stageValueConverter  = "VALUE_CONVERTER"
	stageHeaderConverter = "HEADER_CONVERTER"
	stageTransformation  = "TRANSFORMATION"
	stageTaskPut         = "TASK_PUT"
	stageProduce         = "KAFKA_PRODUCE"
)

// Dead-letter headers, with Kafka Connect's names so that its tools read them.
const (
	HeaderErrorTopic        = "__connect.errors.topic"
	HeaderErrorPartition    = "__connect.errors.partition"
	HeaderErrorOffset       = "__connect.errors.offset"
	HeaderErrorConnector    = "__connect.errors.connector.name"
	HeaderErrorTask         = "__connect.errors.task.id"
	HeaderErrorStage        = "__connect.errors.stage"
	HeaderErrorClass        = "__connect.errors.class.name"
	HeaderErrorExceptionCls = "__connect.errors.exception.class.name"
	HeaderErrorMessage      = "__connect.errors.exception.message"
	HeaderErrorStacktrace   = "__connect.errors.exception.stacktrace"
)

// rejection is one record that could not be decoded, transformed, routed or written.
type rejection struct {
	stage string
	class string // the transform chain's or the plugin's class
	err   error
	// Origin: the log record for sink-side rejections (offset >= 0); the source record's
	// topic and offset -1 for source-side ones.
	topic     string
	partition int32
	offset    int64
	key       []byte
	value     []byte
	headers   []LogHeader
	timestamp time.Time
}

// errorPolicy applies a connector's errors.* settings.
type errorPolicy struct {
	connector   string
	tolerateAll bool
	dlqTopic    string
	dlqHeaders  bool
	logAll      bool
	logMessages bool
	logger      *slog.Logger
	rejected    *atomic.Int64
}

func newErrorPolicy(name string, cfg connect.Config, logger *slog.Logger, rejected *atomic.Int64) *errorPolicy {
	return &errorPolicy{
		connector:   name,
		tolerateAll: cfg.Enum(KeyErrorsTolerance) == "all",
		dlqTopic:    cfg.String(KeyDLQTopic),
		dlqHeaders:  cfg.Bool(KeyDLQHeaders),
		logAll:      cfg.Bool(KeyErrorsLog),
		logMessages: cfg.Bool(KeyErrorsLogMessages),
		logger:      logger,
		rejected:    rejected,
	}
}

// handle decides the fate of a rejected record: under errors.tolerance=none it returns the
// permanent error that fails the task; under all it counts the record and returns the record
// to append to the dead-letter topic (ok=false when none is configured).
func (p *errorPolicy) handle(r *rejection) (dlq LogRecord, ok bool, err error) {
	where := fmt.Sprintf("topic %s", r.topic)
	if r.offset >= 0 {
		where = fmt.Sprintf("%s-%d offset %d", r.topic, r.partition, r.offset)
	}
	if !p.tolerateAll {
		return LogRecord{}, false, connect.Permanentf("%s rejected the record at %s: %w; to skip such records set errors.tolerance=all (and errors.deadletterqueue.topic.name to keep them)", stageName(r.stage), where, r.err)
	}
	p.rejected.Add(1)
	if p.logAll {
		attrs := []any{"connector", p.connector, "stage", r.stage, "topic", r.topic, "partition", r.partition, "offset", r.offset, "err", r.err}
		if p.logMessages {
			attrs = append(attrs, "key", string(r.key), "value", string(r.value))
		}
		p.logger.Warn("record rejected", attrs...)
	}
	if p.dlqTopic == "" {
		return LogRecord{}, false, nil
	}
	out := LogRecord{Timestamp: r.timestamp, Key: r.key, Value: r.value}
	out.Headers = append(out.Headers, r.headers...)
	if p.dlqHeaders {
		out.Headers = append(out.Headers,
			hdr(HeaderErrorTopic, []byte(r.topic)),
			hdr(HeaderErrorPartition, strconv.AppendInt(nil, int64(r.partition), 10)),
			hdr(HeaderErrorOffset, strconv.AppendInt(nil, r.offset, 10)),
			hdr(HeaderErrorConnector, []byte(p.connector)),
			hdr(HeaderErrorTask, []byte("0")),
			hdr(HeaderErrorStage, []byte(r.stage)),
			hdr(HeaderErrorClass, []byte(r.class)),
			hdr(HeaderErrorExceptionCls, []byte(fmt.Sprintf("%T", r.err))),
			hdr(HeaderErrorMessage, []byte(r.err.Error())),
			hdr(HeaderErrorStacktrace, []byte(errorChain(r.err))),
		)
	}
	return out, true, nil
}

func stageName(stage string) string {
	switch stage {
	case stageKeyConverter:
		return "decoding the key"
	case stageValueConverter:
		return "decoding the value"
	case stageHeaderConverter:
		return "decoding the headers"
	case stageTransformation:
		return "a transform"
	case stageTaskPut:
		return "the sink"
	case stageProduce:
		return "routing to the log"
	}
	return stage
}

func hdr(key string, value []byte) LogHeader { return LogHeader{Key: key, Value: value} }

// errorChain renders err and every error it wraps, one per line, as the trace of a failure.
func errorChain(err error) string {
	s := err.Error()
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return s
		}
		if err = u.Unwrap(); err == nil {
			return s
		}
		s += fmt.Sprintf("\ncaused by %T: %v", err, err)
	}
}
