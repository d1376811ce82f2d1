package gql

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf16"
)

// Token kinds. The numbers are the service parser's own: its lists of
// expected tokens come out in this order, so nemo's messages match.
const (
	tEOF         = 0
	tAggregate   = 5
	tAncestor    = 7
	tAnd         = 8
	tAs          = 10
	tAsc         = 11
	tAvg         = 12
	tBy          = 15
	tChild       = 16
	tContains    = 17
	tCount       = 18
	tCountUpTo   = 19
	tDesc        = 21
	tDescendant  = 22
	tDistinct    = 23
	tFalse       = 25
	tFrom        = 26
	tGroup       = 27
	tHas         = 28
	tIn          = 30
	tIs          = 31
	tLimit       = 34
	tNot         = 36
	tNull        = 37
	tOffset      = 38
	tOn          = 39
	tOr          = 40
	tOrder       = 41
	tOver        = 42
	tParent      = 43
	tSelect      = 46
	tSum         = 48
	tTrue        = 50
	tWhere       = 51
	tInteger     = 58
	tDouble      = 59
	tSingleQuote = 62 // 'string'
	tDoubleQuote = 63 // "string"
	tName        = 64 // unquoted name
	tQuotedName  = 65 // `name`
	tNamedSite   = 66 // @name
	tNumberSite  = 67 // @1
	tLParen      = 68
	tRParen      = 69
	tStar        = 70
	tComma       = 71
	tEq          = 72
	tNe          = 73
	tLt          = 74
	tLe          = 75
	tGt          = 76
	tGe          = 77
	tPlus        = 78
	tDot         = 79
	numKinds     = 80
)

// keywords are the reserved words (matched without regard to ASCII case);
// a name that spells one must be quoted. Kinds 5 to 52, in order; several
// (ALL, ANY, BETWEEN, ...) are reserved without being used.
var keywords = []string{
	"aggregate", "all", "ancestor", "and", "any", "as", "asc", "avg", "between", "binary", "by",
	"child", "contains", "count", "count_up_to", "cursor", "desc", "descendant", "distinct", "div",
	"false", "from", "group", "has", "having", "in", "is", "join", "like", "limit", "mod", "not",
	"null", "offset", "on", "or", "order", "over", "parent", "regexp", "rlike", "select", "subset",
	"sum", "superset", "true", "where", "xor",
}

const firstKeyword = 5

// kindImage is how the service's messages name each kind.
var kindImage [numKinds]string

func init() {
	kindImage[tEOF] = "<EOF>"
	for i, k := range keywords {
		kindImage[firstKeyword+i] = `"` + k + `"`
	}
	for k, s := range map[int]string{
		tInteger: "<INTEGER>", tDouble: "<DOUBLE>", tSingleQuote: "<SINGLE_QUOTE_STRING>",
		tDoubleQuote: "<DOUBLE_QUOTE_STRING>", tName: "<UNQUOTED_NAME>", tQuotedName: "<QUOTED_NAME>",
		tNamedSite: "<NAME_BINDING_SITE>", tNumberSite: "<POSITION_BINDING_SITE>",
		tLParen: `"("`, tRParen: `")"`, tStar: `"*"`, tComma: `","`, tEq: `"="`, tNe: `"!="`,
		tLt: `"<"`, tLe: `"<="`, tGt: `">"`, tGe: `">="`, tPlus: `"+"`, tDot: `"."`,
	} {
		kindImage[k] = s
	}
}

// token is one lexed token: its kind, its text as written and where it
// begins (line and column count UTF-16 units from 1, as the service does).
type token struct {
	kind      int
	image     string
	line, col int
}

// lexer cuts a query into tokens with the service's rules: whitespace is
// space, tab, CR and LF; the longest match wins and, between a keyword and
// a name of the same length, the keyword.
type lexer struct {
	src        []uint16 // the query in UTF-16, the unit of the service's columns
	pos        int
	lineStarts []int // where each line begins in src
}

func newLexer(q string) *lexer {
	lx := &lexer{lineStarts: []int{0}}
	for _, r := range q {
		lx.src = utf16.AppendRune(lx.src, r)
	}
	// Lines end as in the service's character stream: after LF, after a
	// CR not followed by LF. A tab is one column.
	for i, c := range lx.src {
		if c == '\n' || c == '\r' && (i+1 == len(lx.src) || lx.src[i+1] != '\n') {
			lx.lineStarts = append(lx.lineStarts, i+1)
		}
	}
	return lx
}

// at returns the line and column of src[i], or 0, 0 before the start.
func (lx *lexer) at(i int) (int, int) {
	if i < 0 || i >= len(lx.src) {
		return 0, 0
	}
	line, _ := slices.BinarySearch(lx.lineStarts, i+1) // lines starting at or before i
	return line, i - lx.lineStarts[line-1] + 1
}

func isSpace(c uint16) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isDigit(c uint16) bool { return c >= '0' && c <= '9' }
func isSign(c uint16) bool  { return c == '+' || c == '-' }

// isNameStart: a letter, _, $, or any character beyond ASCII.
func isNameStart(c uint16) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$' || c >= 0x80
}

func isNamePart(c uint16) bool { return isNameStart(c) || isDigit(c) }

// isEscapable: the characters a backslash may escape in strings and
// quoted names.
func isEscapable(c uint16) bool { return strings.ContainsRune(`\0bnrtZ%_'"`+"`", rune(c)) }

// lexError is the service's lexical error.
type lexError struct{ msg string }

func (e *lexError) Error() string { return e.msg }

// next returns the next token; at the end, an EOF token placed at the last
// character read (line 0, column 0 for an empty query).
func (lx *lexer) next() (token, error) {
	for lx.pos < len(lx.src) && isSpace(lx.src[lx.pos]) {
		lx.pos++
	}
	start := lx.pos
	if start == len(lx.src) {
		l, c := lx.at(start - 1)
		return token{kind: tEOF, line: l, col: c}, nil
	}
	n, kind, read := lx.match(start)
	if n == 0 {
		return token{}, lx.errorAt(start, read)
	}
	lx.pos = start + n
	image := string(utf16.Decode(lx.src[start : start+n]))
	if kind == tName {
		for i, k := range keywords {
			if strings.EqualFold(image, k) && isASCII(image) {
				kind = firstKeyword + i
				break
			}
		}
	}
	l, c := lx.at(start)
	return token{kind: kind, image: image, line: l, col: c}, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// errorAt builds the service's lexical error for a token starting at start
// that matched nothing after reading read characters (the last of which
// failed, unless the input ended).
func (lx *lexer) errorAt(start, read int) error {
	last := start + read - 1 // the last character read
	line, col := lx.at(last)
	cur := lx.src[last]
	var after string
	var encountered string
	if last+1 >= len(lx.src) {
		// Nothing follows: the service reports the end of input, one
		// column on (or at the start of the next line after CR or LF).
		if cur == '\n' || cur == '\r' {
			line, col = line+1, 0
		} else {
			col++
		}
		if read > 1 {
			after = string(utf16.Decode(lx.src[start : last+1]))
		}
		encountered = "<EOF> "
	} else {
		if read > 1 {
			after = string(utf16.Decode(lx.src[start:last]))
		}
		encountered = fmt.Sprintf(`"%s" (%d), `, escapeUnits([]uint16{cur}), cur)
	}
	return &lexError{fmt.Sprintf(`Lexical error at line %d, column %d.  Encountered: %safter : "%s"`, line, col, encountered, escape(after))}
}

// match finds the longest token at start: its length (0: none), kind, and
// how many characters were read to decide (for the error).
func (lx *lexer) match(start int) (n, kind, read int) {
	src := lx.src[start:]
	c := src[0]
	switch {
	case isNameStart(c):
		n = matchRun(src, 1, isNamePart)
		return n, tName, n
	case isDigit(c) || isSign(c) || c == '.':
		n, kind, read = matchNumber(src)
		if n == 0 && c == '+' {
			return 1, tPlus, read
		}
		if n == 0 && c == '.' {
			return 1, tDot, read
		}
		return n, kind, read
	case c == '\'':
		return matchQuoted(src, '\'', tSingleQuote)
	case c == '"':
		return matchQuoted(src, '"', tDoubleQuote)
	case c == '`':
		return matchQuoted(src, '`', tQuotedName)
	case c == '@':
		return matchSite(src)
	}
	return matchPunct(src)
}

// matchRun is the length of src's longest prefix whose characters from
// from on all satisfy in.
func matchRun(src []uint16, from int, in func(uint16) bool) int {
	n := from
	for n < len(src) && in(src[n]) {
		n++
	}
	return n
}

// matchSite matches a binding site at src, which starts with '@': a
// named site (@name) or a numbered one (@1).
func matchSite(src []uint16) (n, kind, read int) {
	switch {
	case len(src) > 1 && isNameStart(src[1]):
		n = matchRun(src, 2, isNamePart)
		return n, tNamedSite, n
	case len(src) > 1 && isDigit(src[1]):
		n = matchRun(src, 2, isDigit)
		return n, tNumberSite, n
	}
	return 0, 0, min(2, len(src))
}

// matchPunct matches an operator or punctuation at src.
func matchPunct(src []uint16) (n, kind, read int) {
	two := func(second uint16, k1, k2 int) (int, int, int) {
		if len(src) > 1 && src[1] == second {
			return 2, k2, 2
		}
		return 1, k1, min(2, len(src))
	}
	switch src[0] {
	case '(':
		return 1, tLParen, 1
	case ')':
		return 1, tRParen, 1
	case '*':
		return 1, tStar, 1
	case ',':
		return 1, tComma, 1
	case '=':
		return 1, tEq, 1
	case '<':
		return two('=', tLt, tLe)
	case '>':
		return two('=', tGt, tGe)
	case '!':
		if len(src) > 1 && src[1] == '=' {
			return 2, tNe, 2
		}
		return 0, 0, min(2, len(src))
	}
	return 0, 0, 1
}

// matchNumber matches INTEGER, [sign] digits, and DOUBLE, [sign] then
// digits "." digits*, or "." digits+, or digits alone, each optionally
// followed by an exponent [eE] ([sign] digit)*: "1e" is a DOUBLE (that
// does not parse), as in the service.
func matchNumber(src []uint16) (n, kind, read int) {
	i := 0
	if i < len(src) && isSign(src[i]) {
		i++
	}
	digits := 0
	for i < len(src) && isDigit(src[i]) {
		i++
		digits++
	}
	if digits > 0 {
		n, kind = i, tInteger
	}
	frac := false
	if i < len(src) && src[i] == '.' {
		j := i + 1
		fd := 0
		for j < len(src) && isDigit(src[j]) {
			j++
			fd++
		}
		switch {
		case digits > 0 || fd > 0:
			i, frac = j, true
			n, kind = i, tDouble
		default:
			// sign "." with no digit: dead at the character after "."
			// (or at the end).
			return 0, 0, min(j+1, len(src))
		}
	}
	if digits == 0 && !frac {
		// A sign followed by neither a digit nor ".".
		return 0, 0, min(i+1, len(src))
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		i++
		n, kind = i, tDouble
		for {
			j := i
			if j < len(src) && isSign(src[j]) {
				j++
			}
			if j < len(src) && isDigit(src[j]) {
				i = j + 1
				n = i
				continue
			}
			break
		}
	}
	return n, kind, n
}

// matchQuoted matches a string or quoted name: the quote, then characters
// other than the quote, backslash and LF, doubled quotes and backslash
// escapes, then the quote.
func matchQuoted(src []uint16, q uint16, kind int) (n, k, read int) {
	i := 1
	for {
		if i >= len(src) {
			return n, kindIf(n, kind), len(src)
		}
		switch c := src[i]; {
		case c == q:
			n = i + 1
			if i+1 < len(src) && src[i+1] == q {
				i += 2
				continue
			}
			return n, kind, n
		case c == '\\':
			if i+1 >= len(src) {
				return n, kindIf(n, kind), len(src)
			}
			if !isEscapable(src[i+1]) {
				return n, kindIf(n, kind), i + 2
			}
			i += 2
		case c == '\n':
			return n, kindIf(n, kind), i + 1
		default:
			i++
		}
	}
}

func kindIf(n, kind int) int {
	if n == 0 {
		return 0
	}
	return kind
}

// escape renders text as the service's messages do: quotes, backslash
// and control characters escaped, everything beyond printable ASCII as
// \uXXXX of its UTF-16 units.
func escape(s string) string { return escapeUnits(utf16.Encode([]rune(s))) }

func escapeUnits(units []uint16) string {
	var b strings.Builder
	for _, c := range units {
		switch c {
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		case '"':
			b.WriteString(`\"`)
		case '\'':
			b.WriteString(`\'`)
		case '\\':
			b.WriteString(`\\`)
		default:
			if c < 0x20 || c > 0x7e {
				fmt.Fprintf(&b, `\u%04x`, c)
			} else {
				b.WriteByte(byte(c))
			}
		}
	}
	return b.String()
}
