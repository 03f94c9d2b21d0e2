package queryapi

// Bounds on a PromQL expression, checked before it is parsed. Prometheus'
// parser ignores every timeout and its cost grows faster than the input:
// measured here, 16,000 nested parentheses (32 KB) took 1.9 s to parse,
// and so did 16,000 chained `or`s or subqueries without one bracket, and
// 40,000 parentheses had answered after 9.3 s a query whose timeout was
// 2 s. A bound on bytes alone would not do, since the cost is in the
// tokens: a long regular expression is one cheap token. So the expression
// is lexed first (Prometheus' own lexer, linear in the input), and its
// tokens and bracket depth are counted. Within the default bounds the
// costliest shapes found parse in well under a second.

import (
	"fmt"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// exprLimits bounds one PromQL expression or selector.
type exprLimits struct {
	maxBytes, maxTokens, maxDepth int
}

// check refuses input over a bound, counting only as far as it must. A
// lexing error ends the count: the parser stops there too, and reports
// it.
func (l exprLimits) check(input string) error {
	if len(input) > l.maxBytes {
		return fmt.Errorf("expression of %d bytes is longer than -query.max-expression-bytes=%d", len(input), l.maxBytes)
	}
	lex := parser.Lex(input)
	var it parser.Item
	tokens, depth := 0, 0
	for {
		lex.NextItem(&it)
		switch it.Typ {
		case parser.EOF, parser.ERROR:
			return nil
		case parser.LEFT_PAREN, parser.LEFT_BRACE, parser.LEFT_BRACKET:
			depth++
			if depth > l.maxDepth {
				return fmt.Errorf("expression nests brackets deeper than -query.max-expression-depth=%d", l.maxDepth)
			}
		case parser.RIGHT_PAREN, parser.RIGHT_BRACE, parser.RIGHT_BRACKET:
			depth = max(depth-1, 0)
		}
		tokens++
		if tokens > l.maxTokens {
			return fmt.Errorf("expression has more than -query.max-expression-tokens=%d tokens", l.maxTokens)
		}
	}
}

// checkRegexp bounds a regular expression that arrives outside PromQL (a
// remote read's matcher), where the lexer does not apply: its length, and
// the depth of its groups counted over every bracket, which can only
// overcount (a bracket escaped or in a class counts too).
func (l exprLimits) checkRegexp(re string) error {
	if len(re) > l.maxBytes {
		return fmt.Errorf("regular expression of %d bytes is longer than -query.max-expression-bytes=%d", len(re), l.maxBytes)
	}
	depth := 0
	for i := range len(re) {
		switch re[i] {
		case '(', '[', '{':
			depth++
			if depth > l.maxDepth {
				return fmt.Errorf("regular expression nests brackets deeper than -query.max-expression-depth=%d", l.maxDepth)
			}
		case ')', ']', '}':
			depth = max(depth-1, 0)
		}
	}
	return nil
}

// checkMatcher bounds a matcher built from a remote read's fields.
func (l exprLimits) checkMatcher(typ labels.MatchType, name, value string) error {
	if len(name)+len(value) > l.maxBytes {
		return fmt.Errorf("matcher of %d bytes is longer than -query.max-expression-bytes=%d", len(name)+len(value), l.maxBytes)
	}
	if typ == labels.MatchRegexp || typ == labels.MatchNotRegexp {
		return l.checkRegexp(value)
	}
	return nil
}

// boundedParser is the parser every query door uses (the engine's
// queries, match[] selectors, exemplar queries): Prometheus' parser behind
// the bounds, so that no door parses an unbounded expression.
type boundedParser struct {
	parser.Parser
	limits exprLimits
}

// ParseExpr implements parser.Parser.
func (p boundedParser) ParseExpr(input string) (parser.Expr, error) {
	if err := p.limits.check(input); err != nil {
		return nil, err
	}
	return p.Parser.ParseExpr(input)
}

// ParseMetricSelector implements parser.Parser.
func (p boundedParser) ParseMetricSelector(input string) ([]*labels.Matcher, error) {
	if err := p.limits.check(input); err != nil {
		return nil, err
	}
	return p.Parser.ParseMetricSelector(input)
}

// ParseMetricSelectors implements parser.Parser.
func (p boundedParser) ParseMetricSelectors(inputs []string) ([][]*labels.Matcher, error) {
	for _, in := range inputs {
		if err := p.limits.check(in); err != nil {
			return nil, err
		}
	}
	return p.Parser.ParseMetricSelectors(inputs)
}

// ParseMetric implements parser.Parser.
func (p boundedParser) ParseMetric(input string) (labels.Labels, error) {
	if err := p.limits.check(input); err != nil {
		return labels.EmptyLabels(), err
	}
	return p.Parser.ParseMetric(input)
}

// ParseSeriesDesc implements parser.Parser.
func (p boundedParser) ParseSeriesDesc(input string) (labels.Labels, []parser.SequenceValue, error) {
	if err := p.limits.check(input); err != nil {
		return labels.EmptyLabels(), nil, err
	}
	return p.Parser.ParseSeriesDesc(input)
}

// newParser returns Prometheus' parser behind cfg's expression bounds.
func newParser(cfg Config) parser.Parser {
	return boundedParser{Parser: parser.NewParser(parser.Options{}), limits: cfg.exprLimits()}
}
