package config

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
)

// Checker validates what the pipeline file only carries: connector configurations and Kafka
// topic settings. The runtime provides it (runtime.Checker).
type Checker interface {
	// CheckConnector validates one connector, returning every problem with its config key
	// ("connector.class" for the class, "name" for the name).
	CheckConnector(name, class string, config map[string]string) []connect.FieldError
	// CheckTopicConfig validates Kafka-named topic settings.
	CheckTopicConfig(config map[string]string) []connect.FieldError
}

// Check validates the pipeline with ch after Resolve (which it calls with the process
// environment if it was not called): every connector's configuration and the
// log's topic settings. Each problem is reported at the key it concerns (at the connector's
// config, or the entry, for a missing key), with placeholder values hidden.
func (p *Pipeline) Check(ch Checker) error {
	var errs Errors
	if len(p.Log.Topic) > 0 {
		for _, fe := range ch.CheckTopicConfig(p.Log.Topic) {
			pos, ok := p.Log.keys["topic."+fe.Key]
			if !ok {
				pos = p.Log.keys["topic"]
			}
			errs = append(errs, Error{File: pos.File, Line: pos.Line, Col: pos.Col, Path: "log.topic." + fe.Key, Msg: fe.Message})
		}
	}
	for _, c := range p.Connectors {
		if c.resolved == nil {
			if err := p.Resolve(nil); err != nil {
				return err
			}
		}
	}
	for _, c := range p.Connectors {
		if c.Name == "" && c.namePos.Line == 0 {
			continue // reported by Load
		}
		for _, fe := range ch.CheckConnector(c.Name, c.Class, c.Resolved()) {
			if !c.bad[fe.Key] {
				errs = append(errs, c.locate(fe))
			}
		}
	}
	return errs.orNil()
}

// locate places a connector's field error.
func (c *Connector) locate(fe connect.FieldError) Error {
	path := c.Path() + ".config." + fe.Key
	pos, ok := c.keys[fe.Key]
	switch {
	case fe.Key == "connector.class" && c.classPos.Line > 0:
		path, pos, ok = c.Path()+".class", c.classPos, true
	case fe.Key == "connector.class" && !ok:
		path = c.Path() + ".class"
	case fe.Key == "name" && !ok && c.namePos.Line > 0:
		path, pos, ok = c.Path()+".name", c.namePos, true
	}
	if !ok {
		pos = c.configPos
		if pos.Line == 0 {
			pos = c.Pos
		}
	}
	msg := fe.Message
	if c.secret[fe.Key] {
		msg = hide(msg, c.resolved[fe.Key].Reveal(), c.Config[fe.Key])
	}
	return Error{File: pos.File, Line: pos.Line, Col: pos.Col, Path: path, Msg: msg}
}

// hide replaces a resolved secret in a message by the placeholder it came from: in the
// "(got ...)" that validation messages end with, and anywhere else when it is long enough
// not to be mistaken for other text.
func hide(msg, secret, written string) string {
	if secret == "" {
		return msg
	}
	got := regexp.MustCompile(`\(got "?` + regexp.QuoteMeta(secret) + `"?\)`)
	msg = got.ReplaceAllLiteralString(msg, "(got "+written+")")
	if len(secret) >= 4 {
		msg = strings.ReplaceAll(msg, secret, connect.Redacted)
		if q := strconv.Quote(secret); q[1:len(q)-1] != secret {
			msg = strings.ReplaceAll(msg, q[1:len(q)-1], connect.Redacted)
		}
	}
	return msg
}

// Open loads pipeline files, resolves their placeholders (env nil: the process environment)
// and checks them with ch, reporting the problems of every stage at once. The pipeline is
// returned also with errors, for what could be read.
func Open(paths []string, env Env, ch Checker) (*Pipeline, error) {
	p, err := Load(paths...)
	var errs Errors
	errors.As(err, &errs)
	if p == nil {
		return nil, errs.orNil()
	}
	return p, p.finish(errs, env, ch)
}

// finish runs Resolve and Check after a load that found errs.
func (p *Pipeline) finish(errs Errors, env Env, ch Checker) error {
	if err := p.Resolve(env); err != nil {
		var rerrs Errors
		errors.As(err, &rerrs)
		errs = append(errs, rerrs...)
	}
	if ch != nil {
		if err := p.Check(ch); err != nil {
			var cerrs Errors
			errors.As(err, &cerrs)
			errs = append(errs, cerrs...)
		}
	}
	return errs.orNil()
}

// OpenBytes is Open for one file's contents (for tests and tools).
func OpenBytes(name string, data []byte, env Env, ch Checker) (*Pipeline, error) {
	p, err := Parse(name, data)
	var errs Errors
	errors.As(err, &errs)
	return p, p.finish(errs, env, ch)
}
