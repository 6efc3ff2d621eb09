package transforms

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm"
	"github.com/sluice-cdc/sluice/connect"
)

// Expression limits. An expression is compiled once; its cost per record is bounded by
// maxExprNodes times the size of the record, because loops (all, any, filter, map, ...) may
// not nest, and the VM refuses to allocate more than exprMemoryBudget elements (ranges,
// arrays, repeat).
const (
	maxExprNodes     = 1000
	maxExprLen       = 10000
	exprMemoryBudget = 100000
)

// exprEnv is what an expression sees. Field access on rows (value.after.status) and
// headers (headers.tenant) is rewritten into exprGet calls at compile time, because rows
// are ordered field lists, not maps.
type exprEnv struct {
	Key       any         `expr:"key"`
	Value     any         `expr:"value"`
	Headers   headersView `expr:"headers"`
	Header    debHeaders  `expr:"header"`
	Topic     string      `expr:"topic"`
	Op        string      `expr:"op"`
	Timestamp int64       `expr:"timestamp"`
	Partition int32       `expr:"partition"`
}

// headersView exposes headers by name: headers.tenant is the last "tenant" header as text,
// or null.
type headersView connect.Headers

// debHeaders exposes headers the way Debezium's scripting transforms do:
// header.tenant.value.
type debHeaders connect.Headers

// exprErr is an evaluation fault (a field read on a non-object, ...).
type exprErr struct{ msg string }

func (e *exprErr) Error() string { return e.msg }

// exprGet reads a field of a row, an element of an array, or a header. A missing field, or
// any field of null, is null.
func exprGet(args ...any) (any, error) {
	from, prop := args[0], args[1]
	switch x := from.(type) {
	case nil:
		return nil, nil
	case connect.Row:
		name, ok := prop.(string)
		if !ok {
			return nil, &exprErr{fmt.Sprintf("cannot index an object with %s", typeName(prop))}
		}
		v, _ := x.Get(name)
		return v, nil
	case []any:
		i, ok := exprInt(prop)
		if !ok {
			return nil, &exprErr{fmt.Sprintf("cannot index an array with %s", typeName(prop))}
		}
		if i < 0 {
			i += len(x)
		}
		if i < 0 || i >= len(x) {
			return nil, nil
		}
		return x[i], nil
	case headersView:
		name, _ := prop.(string)
		v, ok := connect.Headers(x).Get(name)
		if !ok || v == nil {
			return nil, nil
		}
		return string(v), nil
	case debHeaders:
		name, _ := prop.(string)
		v, ok := connect.Headers(x).Get(name)
		if !ok {
			return nil, nil
		}
		var s any
		if v != nil {
			s = string(v)
		}
		return connect.Row{{Name: "value", Value: s}}, nil
	}
	return nil, &exprErr{fmt.Sprintf("cannot read field %v of %s", prop, typeName(from))}
}

func exprInt(v any) (int, bool) {
	switch x := v.(type) {
	case int:
		return x, true
	case int64:
		return int(x), true
	case float64:
		if x == float64(int(x)) {
			return int(x), true
		}
	}
	return 0, false
}

// exprIn implements the in operator: a field name in a row, a header name in headers, an
// element in an array, a substring in a string.
func exprIn(args ...any) (any, error) {
	needle, hay := args[0], args[1]
	switch x := hay.(type) {
	case nil:
		return false, nil
	case connect.Row:
		name, ok := needle.(string)
		return ok && x.Index(name) >= 0, nil
	case headersView:
		name, _ := needle.(string)
		_, ok := connect.Headers(x).Get(name)
		return ok, nil
	case debHeaders:
		name, _ := needle.(string)
		_, ok := connect.Headers(x).Get(name)
		return ok, nil
	case []any:
		for _, e := range x {
			if exprEqual(e, needle) {
				return true, nil
			}
		}
		return false, nil
	case string:
		s, ok := needle.(string)
		return ok && strings.Contains(x, s), nil
	}
	return nil, &exprErr{fmt.Sprintf("cannot use in with %s", typeName(hay))}
}

func exprEqual(a, b any) bool {
	if ai, ok := exprNum(a); ok {
		bi, ok := exprNum(b)
		return ok && ai == bi
	}
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	return false
}

func exprNum(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// exprPatcher rewrites member access and the in operator into exprGet / exprIn calls, and
// counts loop nesting.
type exprPatcher struct{}

func (exprPatcher) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.MemberNode:
		call := &ast.CallNode{
			Callee:    &ast.IdentifierNode{Value: "__get"},
			Arguments: []ast.Node{n.Node, n.Property},
		}
		ast.Patch(node, call)
	case *ast.BinaryNode:
		if n.Operator == "in" || n.Operator == "not in" {
			var call ast.Node = &ast.CallNode{
				Callee:    &ast.IdentifierNode{Value: "__in"},
				Arguments: []ast.Node{n.Left, n.Right},
			}
			if n.Operator == "not in" {
				call = &ast.UnaryNode{Operator: "not", Node: call}
			}
			ast.Patch(node, call)
		}
	}
}

// closureDepth is the deepest nesting of closures (the bodies of all, any, filter, map, ...).
func closureDepth(n ast.Node) int {
	depth := 0
	var walk func(n ast.Node, cur int)
	walk = func(n ast.Node, cur int) {
		if n == nil {
			return
		}
		if _, ok := n.(*ast.PredicateNode); ok {
			cur++
			if cur > depth {
				depth = cur
			}
		}
		for _, c := range children(n) {
			walk(c, cur)
		}
	}
	walk(n, 0)
	return depth
}

// children lists the direct sub-nodes of n.
func children(n ast.Node) []ast.Node {
	switch x := n.(type) {
	case *ast.UnaryNode:
		return []ast.Node{x.Node}
	case *ast.BinaryNode:
		return []ast.Node{x.Left, x.Right}
	case *ast.ChainNode:
		return []ast.Node{x.Node}
	case *ast.MemberNode:
		return []ast.Node{x.Node, x.Property}
	case *ast.SliceNode:
		return []ast.Node{x.Node, x.From, x.To}
	case *ast.CallNode:
		return append([]ast.Node{x.Callee}, x.Arguments...)
	case *ast.BuiltinNode:
		return x.Arguments
	case *ast.PredicateNode:
		return []ast.Node{x.Node}
	case *ast.ConditionalNode:
		return []ast.Node{x.Cond, x.Exp1, x.Exp2}
	case *ast.VariableDeclaratorNode:
		return []ast.Node{x.Value, x.Expr}
	case *ast.SequenceNode:
		return x.Nodes
	case *ast.ArrayNode:
		return x.Nodes
	case *ast.MapNode:
		return x.Pairs
	case *ast.PairNode:
		return []ast.Node{x.Key, x.Value}
	}
	return nil
}

// program is a compiled expression, safe for concurrent use.
type program struct {
	src  string
	prog *vm.Program
	pool sync.Pool
}

type exprRun struct {
	vm  vm.VM
	env exprEnv
}

// compileExpr compiles src over the record environment. want is "bool" for conditions and
// "any" for topic expressions.
func compileExpr(src string, asBool bool) (*program, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("must not be empty")
	}
	if len(src) > maxExprLen {
		return nil, fmt.Errorf("must be at most %d characters (got %d)", maxExprLen, len(src))
	}
	opts := []expr.Option{
		expr.Env(exprEnv{}),
		expr.Patch(exprPatcher{}),
		expr.Function("__get", exprGet, new(func(any, any) any)),
		expr.Function("__in", exprIn, new(func(any, any) bool)),
		expr.DisableBuiltin("now"),
		expr.Timezone("UTC"),
		expr.MaxNodes(maxExprNodes),
	}
	if asBool {
		// Reject expressions whose type is known not to be boolean now; the program that runs
		// is compiled without the conversion so that a dynamic non-boolean result gets a clear
		// error from test.
		if _, err := expr.Compile(src, append(opts, expr.AsBool())...); err != nil {
			return nil, fmt.Errorf("invalid expression: %s", firstLine(err.Error()))
		}
	}
	tree, err := expr.Compile(src, opts...)
	if err != nil {
		return nil, fmt.Errorf("invalid expression: %s", firstLine(err.Error()))
	}
	if d := closureDepth(tree.Node()); d > 1 {
		return nil, errors.New("invalid expression: loops (all, any, filter, map, ...) must not nest")
	}
	p := &program{src: src, prog: tree}
	p.pool.New = func() any { return new(exprRun) }
	return p, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// checkExpr is a ConfigKey.Check for boolean conditions.
func checkExpr(asBool bool) func(string) error {
	return func(v string) error {
		if strings.TrimSpace(v) == "" {
			return nil // reported as "is required"
		}
		_, err := compileExpr(v, asBool)
		return err
	}
}

// recordOp is the change event's op letter for expressions: the envelope's op, or after
// unwrap the __op field or header; "" when the record carries none.
func recordOp(r connect.Record) string {
	if row, ok := r.Value.(connect.Row); ok {
		for i := range row {
			if row[i].Name == connect.FieldOp || row[i].Name == "__op" {
				if s, ok := row[i].Value.(string); ok {
					return s
				}
			}
		}
	}
	if v, ok := r.Headers.Get("__op"); ok {
		return string(v)
	}
	return ""
}

// eval runs the program over r.
func (p *program) eval(r connect.Record) (any, error) {
	run := p.pool.Get().(*exprRun)
	run.env = exprEnv{
		Key:       r.Key,
		Value:     r.Value,
		Headers:   headersView(r.Headers),
		Header:    debHeaders(r.Headers),
		Topic:     r.Topic,
		Op:        recordOp(r),
		Timestamp: r.Timestamp.UnixMilli(),
		Partition: r.Partition,
	}
	run.vm.MemoryBudget = exprMemoryBudget
	out, err := run.vm.Run(p.prog, &run.env)
	run.env = exprEnv{}
	p.pool.Put(run)
	if err != nil {
		return nil, fmt.Errorf("evaluate %q: %s", p.src, firstLine(err.Error()))
	}
	return out, nil
}

// test evaluates a boolean condition.
func (p *program) test(r connect.Record) (bool, error) {
	out, err := p.eval(r)
	if err != nil {
		return false, err
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("evaluate %q: want a boolean, got %s", p.src, typeName(out))
	}
	return b, nil
}
