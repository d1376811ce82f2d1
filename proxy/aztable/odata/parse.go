package odata

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// ErrInvalidFilter is wrapped by every $filter parse error; the frontend
// answers it with 400 InvalidInput.
var ErrInvalidFilter = errors.New("odata: invalid $filter")

// SyntaxError is a $filter parse error at byte offset Pos of the input.
type SyntaxError struct {
	Pos int
	Msg string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid $filter at position %d: %s", e.Pos, e.Msg)
}

// Unwrap makes errors.Is(err, ErrInvalidFilter) hold.
func (e *SyntaxError) Unwrap() error { return ErrInvalidFilter }

// maxDepth bounds nesting of parentheses and not, so hostile input cannot
// exhaust the stack.
const maxDepth = 100

type tokKind uint8

const (
	tEOF tokKind = iota
	tIdent
	tString
	tNumber
	tTyped // prefix'...' literal: datetime, guid, binary, X
	tLParen
	tRParen
	tComma
)

type token struct {
	kind tokKind
	pos  int
	text string // identifier, number text, typed-literal prefix
	val  string // unescaped string / typed-literal body
}

type lexer struct {
	s   string
	pos int
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentChar(c byte) bool  { return isIdentStart(c) || isDigit(c) }

func (l *lexer) errAt(pos int, format string, args ...any) error {
	return &SyntaxError{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

// quoted reads a single-quoted body starting at the opening quote, with a
// doubled quote standing for one quote.
func (l *lexer) quoted() (string, error) {
	start := l.pos
	var sb strings.Builder
	for i := start + 1; i < len(l.s); i++ {
		if l.s[i] != '\'' {
			sb.WriteByte(l.s[i])
			continue
		}
		if i+1 < len(l.s) && l.s[i+1] == '\'' {
			sb.WriteByte('\'')
			i++
			continue
		}
		l.pos = i + 1
		return sb.String(), nil
	}
	return "", l.errAt(start, "unterminated string literal")
}

func (l *lexer) next() (token, error) {
	for l.pos < len(l.s) && (l.s[l.pos] == ' ' || l.s[l.pos] == '\t' || l.s[l.pos] == '\r' || l.s[l.pos] == '\n') {
		l.pos++
	}
	start := l.pos
	if start >= len(l.s) {
		return token{kind: tEOF, pos: start}, nil
	}
	c := l.s[start]
	switch {
	case c == '(':
		l.pos++
		return token{kind: tLParen, pos: start}, nil
	case c == ')':
		l.pos++
		return token{kind: tRParen, pos: start}, nil
	case c == ',':
		l.pos++
		return token{kind: tComma, pos: start}, nil
	case c == '\'':
		v, err := l.quoted()
		return token{kind: tString, pos: start, val: v}, err
	case c == '"':
		return token{}, l.errAt(start, "string literals must be in single quotes")
	case isDigit(c) || c == '-' && start+1 < len(l.s) && isDigit(l.s[start+1]):
		return l.number()
	case isIdentStart(c):
		for l.pos < len(l.s) && isIdentChar(l.s[l.pos]) {
			l.pos++
		}
		word := l.s[start:l.pos]
		if l.pos < len(l.s) && l.s[l.pos] == '\'' {
			switch strings.ToLower(word) {
			case "datetime", "guid", "binary", "x":
				v, err := l.quoted()
				return token{kind: tTyped, pos: start, text: strings.ToLower(word), val: v}, err
			}
			return token{}, l.errAt(start, "unknown literal prefix %q", word)
		}
		return token{kind: tIdent, pos: start, text: word}, nil
	}
	return token{}, l.errAt(start, "unexpected character %q", c)
}

// number lexes -?digits(.digits)?([eE][+-]?digits)?L? and insists that it
// is not glued to a following identifier.
func (l *lexer) number() (token, error) {
	start := l.pos
	if l.s[l.pos] == '-' {
		l.pos++
	}
	digits := func() bool {
		from := l.pos
		for l.pos < len(l.s) && isDigit(l.s[l.pos]) {
			l.pos++
		}
		return l.pos > from
	}
	digits()
	if l.pos < len(l.s) && l.s[l.pos] == '.' {
		l.pos++
		if !digits() {
			return token{}, l.errAt(start, "malformed number")
		}
	}
	if l.pos < len(l.s) && (l.s[l.pos] == 'e' || l.s[l.pos] == 'E') {
		l.pos++
		if l.pos < len(l.s) && (l.s[l.pos] == '+' || l.s[l.pos] == '-') {
			l.pos++
		}
		if !digits() {
			return token{}, l.errAt(start, "malformed number")
		}
	}
	if l.pos < len(l.s) && (l.s[l.pos] == 'L' || l.s[l.pos] == 'l') {
		l.pos++
	}
	if l.pos < len(l.s) && (isIdentChar(l.s[l.pos]) || l.s[l.pos] == '.') {
		return token{}, l.errAt(start, "malformed number")
	}
	return token{kind: tNumber, pos: start, text: l.s[start:l.pos]}, nil
}

type parser struct {
	lex   lexer
	tok   token
	depth int
}

func (p *parser) advance() error {
	t, err := p.lex.next()
	p.tok = t
	return err
}

func (p *parser) errf(format string, args ...any) error {
	return &SyntaxError{Pos: p.tok.pos, Msg: fmt.Sprintf(format, args...)}
}

// keyword reports whether the current token is the (case-insensitive)
// keyword kw. Azure documents keywords as lower case; Azurite also takes
// "EQ", and accepting it costs nothing since keywords cannot be property
// names.
func (p *parser) keyword(kw string) bool {
	return p.tok.kind == tIdent && strings.EqualFold(p.tok.text, kw)
}

// reserved words cannot name a property in a filter.
func reserved(word string) bool {
	switch strings.ToLower(word) {
	case "and", "or", "not":
		return true
	}
	return word == "true" || word == "false"
}

// Parse parses a $filter expression. An empty (or all-blank) filter matches
// every entity, as in Azure. Errors are *SyntaxError values wrapping
// ErrInvalidFilter.
func Parse(s string) (Expr, error) {
	p := &parser{lex: lexer{s: s}}
	if err := p.advance(); err != nil {
		return nil, err
	}
	if p.tok.kind == tEOF {
		return &Const{Value: true}, nil
	}
	x, err := p.or()
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tEOF {
		return nil, p.errf("unexpected %s", p.describe())
	}
	return x, nil
}

func (p *parser) describe() string {
	switch p.tok.kind {
	case tEOF:
		return "end of filter"
	case tIdent:
		return fmt.Sprintf("%q", p.tok.text)
	case tRParen:
		return `")"`
	case tLParen:
		return `"("`
	case tComma:
		return `","`
	}
	return "literal"
}

func (p *parser) or() (Expr, error) {
	x, err := p.and()
	for err == nil && p.keyword("or") {
		if err = p.advance(); err != nil {
			return nil, err
		}
		var r Expr
		if r, err = p.and(); err == nil {
			x = &Or{L: x, R: r}
		}
	}
	return x, err
}

func (p *parser) and() (Expr, error) {
	x, err := p.unary()
	for err == nil && p.keyword("and") {
		if err = p.advance(); err != nil {
			return nil, err
		}
		var r Expr
		if r, err = p.unary(); err == nil {
			x = &And{L: x, R: r}
		}
	}
	return x, err
}

func (p *parser) enter() error {
	if p.depth++; p.depth > maxDepth {
		return p.errf("filter nested more than %d levels deep", maxDepth)
	}
	return nil
}

// unary parses "not unary" or a comparison. not applies to the whole
// comparison that follows ("not I eq 3" is not (I eq 3)), the reading
// every client means by it.
func (p *parser) unary() (Expr, error) {
	if !p.keyword("not") {
		return p.comparison()
	}
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	if err := p.advance(); err != nil {
		return nil, err
	}
	x, err := p.unary()
	if err != nil {
		return nil, err
	}
	return &Not{X: x}, nil
}

var compareOps = map[string]Op{"eq": Eq, "ne": Ne, "gt": Gt, "ge": Ge, "lt": Lt, "le": Le}

func (p *parser) compareOp() (Op, bool) {
	if p.tok.kind != tIdent {
		return 0, false
	}
	op, ok := compareOps[strings.ToLower(p.tok.text)]
	return op, ok
}

// operand is one side of a comparison: a property name or a literal.
type operand struct {
	pos  int
	prop string
	lit  Literal
}

func (p *parser) comparison() (Expr, error) {
	if p.tok.kind == tLParen {
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		if err := p.advance(); err != nil {
			return nil, err
		}
		x, err := p.or()
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tRParen {
			return nil, p.errf(`expected ")", found %s`, p.describe())
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		if _, ok := p.compareOp(); ok {
			return nil, p.errf("a comparison compares a property with a literal, not a parenthesised expression")
		}
		return x, nil
	}
	left, err := p.operand()
	if err != nil {
		return nil, err
	}
	op, ok := p.compareOp()
	if !ok {
		switch {
		case left.prop != "":
			return &BoolProperty{Property: left.prop}, nil
		case left.lit.Type == tablecodec.EdmBoolean:
			return &Const{Value: left.lit.Value.(bool)}, nil
		}
		return nil, &SyntaxError{Pos: left.pos, Msg: "a literal alone is not a condition"}
	}
	opPos := p.tok.pos
	if err := p.advance(); err != nil {
		return nil, err
	}
	right, err := p.operand()
	if err != nil {
		return nil, err
	}
	switch {
	case left.prop != "" && right.prop == "":
		return &Compare{Property: left.prop, Op: op, Value: right.lit}, nil
	case left.prop == "" && right.prop != "":
		return &Compare{Property: right.prop, Op: op.flip(), Value: left.lit}, nil
	case left.prop != "":
		return nil, &SyntaxError{Pos: opPos, Msg: "a property can only be compared with a literal"}
	}
	return nil, &SyntaxError{Pos: opPos, Msg: "a comparison needs a property on one side"}
}

func (p *parser) operand() (operand, error) {
	t := p.tok
	o := operand{pos: t.pos}
	var err error
	switch t.kind {
	case tIdent:
		switch {
		case t.text == "true" || t.text == "false":
			o.lit = Literal{Type: tablecodec.EdmBoolean, Value: t.text == "true"}
		case reserved(t.text):
			return o, p.errf("unexpected %q", t.text)
		default:
			o.prop = t.text
		}
	case tString:
		o.lit = Literal{Type: tablecodec.EdmString, Value: t.val}
	case tNumber:
		o.lit, err = numberLiteral(t)
	case tTyped:
		o.lit, err = typedLiteral(t)
	default:
		return o, p.errf("expected a property or a literal, found %s", p.describe())
	}
	if err != nil {
		return o, err
	}
	if err := p.advance(); err != nil {
		return o, err
	}
	if o.prop != "" && p.tok.kind == tLParen {
		return o, &SyntaxError{Pos: t.pos, Msg: fmt.Sprintf("function %q is not supported", o.prop)}
	}
	return o, nil
}

// numberLiteral types an integer as Edm.Int32 when it fits, else Edm.Int64
// (or Int64 always with the L suffix); anything with a fraction or exponent
// is Edm.Double.
func numberLiteral(t token) (Literal, error) {
	text := t.text
	long := strings.HasSuffix(text, "L") || strings.HasSuffix(text, "l")
	if long {
		text = text[:len(text)-1]
	}
	if !strings.ContainsAny(text, ".eE") {
		i, err := strconv.ParseInt(text, 10, 64)
		switch {
		case err != nil:
			return Literal{}, &SyntaxError{Pos: t.pos, Msg: fmt.Sprintf("integer %s out of range", t.text)}
		case long || int64(int32(i)) != i:
			return Literal{Type: tablecodec.EdmInt64, Value: i}, nil
		}
		return Literal{Type: tablecodec.EdmInt32, Value: int32(i)}, nil
	}
	if long {
		return Literal{}, &SyntaxError{Pos: t.pos, Msg: "L suffix on a non-integer"}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return Literal{}, &SyntaxError{Pos: t.pos, Msg: fmt.Sprintf("double %s out of range", t.text)}
	}
	return Literal{Type: tablecodec.EdmDouble, Value: f}, nil
}

func typedLiteral(t token) (Literal, error) {
	bad := func(err error) (Literal, error) {
		return Literal{}, &SyntaxError{Pos: t.pos, Msg: fmt.Sprintf("invalid %s literal: %v", t.text, err)}
	}
	switch t.text {
	case "datetime":
		v, err := tablecodec.ParseDateTime(t.val)
		if err != nil {
			return bad(err)
		}
		return Literal{Type: tablecodec.EdmDateTime, Value: v}, nil
	case "guid":
		v, err := tablecodec.ParseGUID(t.val)
		if err != nil {
			return bad(err)
		}
		return Literal{Type: tablecodec.EdmGuid, Value: v}, nil
	}
	v, err := hex.DecodeString(t.val) // binary'..' and X'..'
	if err != nil {
		return bad(err)
	}
	return Literal{Type: tablecodec.EdmBinary, Value: v}, nil
}

// ErrInvalidSelect is wrapped by ParseSelect errors (400 InvalidInput).
var ErrInvalidSelect = errors.New("odata: invalid $select")

// ParseSelect splits a $select value into property names. It returns nil
// (select everything) for an empty value or "*". Duplicates are kept;
// tablecodec.AppendJSON writes each property once.
func ParseSelect(s string) ([]string, error) {
	if t := strings.TrimSpace(s); t == "" || t == "*" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	for i, n := range parts {
		n = strings.TrimSpace(n)
		if !tablecodec.ValidName(n) {
			return nil, fmt.Errorf("%w: bad property name %q", ErrInvalidSelect, n)
		}
		parts[i] = n
	}
	return parts, nil
}
