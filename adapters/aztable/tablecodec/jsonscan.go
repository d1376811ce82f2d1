package tablecodec

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonKind is the kind of a scalar JSON value.
type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonString
	jsonNumber // text holds the literal, as encoding/json's Number does
	jsonBool
)

// jsonValue is one scalar member value of the payload object.
type jsonValue struct {
	kind jsonKind
	text string // a string's decoded value or a number's literal
	b    bool
}

// display is the value as encoding/json would have given it (string,
// number text, bool or nil), for error messages.
func (v jsonValue) display() any {
	switch v.kind {
	case jsonString, jsonNumber:
		return v.text
	case jsonBool:
		return v.b
	}
	return nil
}

// jsonMember is one name/value pair of the payload object, in body order.
type jsonMember struct {
	name string
	val  jsonValue
	// annotation: the member is a "Base@odata.type" annotation (its value
	// a string), not a property.
	annotation bool
	// annotated: an annotation gave this member the type typ.
	annotated bool
	typ       string
}

// smallObject is how many members an object holds before its names are
// found through a map rather than a scan; entities have few properties.
const smallObject = 32

// readJSONObject reads the payload's one JSON object (RFC 8259), appends
// its members, annotations included, in body order to members, and gives
// each annotated member its type. A name appears once, a value is no
// object or array, an annotation is a string and annotates a member of
// the object. It reads the body in one pass and decides and decodes as
// encoding/json's Decoder.Token does (strings coerced to valid UTF-8,
// numbers kept as their text), with the same errors: a syntax error in a
// member's value, or between its name and value, names that member.
// Names and values share one copy of the body.
func readJSONObject(body []byte, members []jsonMember) ([]jsonMember, error) {
	s := jsonScanner{src: string(body)}
	if s.peek() != '{' {
		return nil, fmt.Errorf("%w: payload is not a JSON object", ErrInvalidValue)
	}
	s.pos++
	var err error
	if s.peek() == '}' {
		s.pos++
	} else if members, err = s.members(members); err != nil {
		return nil, err
	}
	if s.peek() != eof {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrInvalidValue)
	}
	return members, s.resolveAnnotations(members)
}

// jsonScanner reads a JSON text from pos on.
type jsonScanner struct {
	src string
	pos int
	buf []byte // scratch for decoding strings with escapes
	// byName indexes the members read so far by name, past smallObject
	// members.
	byName map[string]int
}

// find returns the index of the member named name in members, the
// members read so far, or -1.
func (s *jsonScanner) find(members []jsonMember, name string) int {
	if s.byName != nil {
		if i, ok := s.byName[name]; ok {
			return i
		}
		return -1
	}
	for i := range members {
		if members[i].name == name {
			return i
		}
	}
	return -1
}

// indexLast lets find know the last of members.
func (s *jsonScanner) indexLast(members []jsonMember) {
	switch n := len(members); {
	case s.byName != nil:
		s.byName[members[n-1].name] = n - 1
	case n > smallObject:
		s.byName = make(map[string]int, 2*n)
		for i := range members {
			s.byName[members[i].name] = i
		}
	}
}

// resolveAnnotations gives each annotated member its type; an annotation
// must annotate a member of the object.
func (s *jsonScanner) resolveAnnotations(members []jsonMember) error {
	for _, a := range members {
		if !a.annotation {
			continue
		}
		base := a.name[:len(a.name)-len(typeSuffix)]
		i := s.find(members, base)
		if i < 0 {
			return propErr(base, ErrInvalidValue, "type annotation without a value")
		}
		members[i].annotated, members[i].typ = true, a.val.text
	}
	return nil
}

const eof = -1

// peek skips whitespace and returns the next byte, or eof.
func (s *jsonScanner) peek() int {
	for ; s.pos < len(s.src); s.pos++ {
		switch c := s.src[s.pos]; c {
		case ' ', '\t', '\n', '\r':
		default:
			return int(c)
		}
	}
	return eof
}

func (s *jsonScanner) syntaxError(context string) error {
	return fmt.Errorf("%w: invalid JSON at offset %d %s", ErrInvalidValue, s.pos, context)
}

// members reads the object's members, appending them to members, and its
// closing brace.
func (s *jsonScanner) members(members []jsonMember) ([]jsonMember, error) {
	for {
		m, err := s.member(members)
		if err != nil {
			return nil, err
		}
		members = append(members, m)
		s.indexLast(members)
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return members, nil
		default:
			return nil, s.syntaxError("after a member")
		}
	}
}

// member reads one name and scalar value; members are the ones before it.
func (s *jsonScanner) member(members []jsonMember) (jsonMember, error) {
	if s.peek() != '"' {
		return jsonMember{}, s.syntaxError("looking for a member name")
	}
	s.pos++
	name, ok := s.str()
	if !ok {
		return jsonMember{}, s.syntaxError("in a member name")
	}
	if s.find(members, name) >= 0 {
		return jsonMember{}, propErr(strings.TrimSuffix(name, typeSuffix), ErrDuplicateProperty, "")
	}
	m := jsonMember{name: name}
	if s.peek() != ':' {
		return m, propErr(name, ErrInvalidValue, "invalid JSON at offset %d after the name", s.pos)
	}
	s.pos++
	switch s.peek() {
	case '{', '[':
		return m, propErr(name, ErrInvalidValue, "objects and arrays are not property values")
	}
	if m.val, ok = s.scalar(); !ok {
		return m, propErr(name, ErrInvalidValue, "invalid JSON value at offset %d", s.pos)
	}
	if base, isAnnotation := strings.CutSuffix(name, typeSuffix); isAnnotation {
		if m.val.kind != jsonString {
			return m, propErr(base, ErrInvalidValue, "odata.type annotation must be a string")
		}
		m.annotation = true
	}
	return m, nil
}

// scalar reads a string, number, true, false or null at pos. Like a
// top-level value in encoding/json, it ends where its grammar does: what
// follows is the caller's to judge.
func (s *jsonScanner) scalar() (jsonValue, bool) {
	if s.pos == len(s.src) {
		return jsonValue{}, false
	}
	switch c := s.src[s.pos]; {
	case c == '"':
		s.pos++
		text, ok := s.str()
		return jsonValue{kind: jsonString, text: text}, ok
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return jsonValue{kind: jsonBool, b: true}, s.literal("true")
	case c == 'f':
		return jsonValue{kind: jsonBool}, s.literal("false")
	case c == 'n':
		return jsonValue{}, s.literal("null")
	}
	return jsonValue{}, false
}

func (s *jsonScanner) literal(word string) bool {
	if !strings.HasPrefix(s.src[s.pos:], word) {
		return false
	}
	s.pos += len(word)
	return true
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *jsonScanner) number() (jsonValue, bool) {
	start := s.pos
	if s.src[s.pos] == '-' {
		s.pos++
	}
	if s.at('0') {
		s.pos++
	} else if !s.digits() {
		return jsonValue{}, false
	}
	if s.at('.') {
		s.pos++
		if !s.digits() {
			return jsonValue{}, false
		}
	}
	if s.at('e') || s.at('E') {
		s.pos++
		if s.at('+') || s.at('-') {
			s.pos++
		}
		if !s.digits() {
			return jsonValue{}, false
		}
	}
	return jsonValue{kind: jsonNumber, text: s.src[start:s.pos]}, true
}

func (s *jsonScanner) at(c byte) bool { return s.pos < len(s.src) && s.src[s.pos] == c }

// digits skips [0-9]* and reports whether there was one.
func (s *jsonScanner) digits() bool {
	start := s.pos
	for s.pos < len(s.src) && s.src[s.pos] >= '0' && s.src[s.pos] <= '9' {
		s.pos++
	}
	return s.pos > start
}

// str reads the rest of a string literal whose opening quote is before
// pos, and returns its value: the body's own bytes unless it has escapes
// or invalid UTF-8.
func (s *jsonScanner) str() (string, bool) {
	start := s.pos
	for i := start; i < len(s.src); {
		switch c := s.src[i]; {
		case c == '"':
			s.pos = i + 1
			return s.src[start:i], true
		case c == '\\' || c < ' ':
			return s.decodeStr(start, i)
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRuneInString(s.src[i:])
			if r == utf8.RuneError && n == 1 {
				return s.decodeStr(start, i)
			}
			i += n
		}
	}
	return "", false
}

// decodeStr is str for a literal that needs decoding from i on: escapes
// resolved, each byte of invalid UTF-8 and each unpaired surrogate
// replaced by U+FFFD (as encoding/json does), control characters refused.
func (s *jsonScanner) decodeStr(start, i int) (string, bool) {
	if s.buf == nil {
		s.buf = make([]byte, 0, 64) // an ETag fits
	}
	b := append(s.buf[:0], s.src[start:i]...)
	for i < len(s.src) {
		switch c := s.src[i]; {
		case c == '"':
			s.pos, s.buf = i+1, b
			return string(b), true
		case c == '\\':
			var ok bool
			if b, i, ok = s.escape(b, i); !ok {
				return "", false
			}
		case c < ' ':
			return "", false
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, n := utf8.DecodeRuneInString(s.src[i:])
			b = utf8.AppendRune(b, r)
			i += n
		}
	}
	return "", false
}

// escape appends the character the escape sequence at i stands for, and
// returns the index after it.
func (s *jsonScanner) escape(b []byte, i int) ([]byte, int, bool) {
	if i+1 == len(s.src) {
		return b, i, false
	}
	switch c := s.src[i+1]; c {
	case '"', '\\', '/':
		return append(b, c), i + 2, true
	case 'b':
		return append(b, '\b'), i + 2, true
	case 'f':
		return append(b, '\f'), i + 2, true
	case 'n':
		return append(b, '\n'), i + 2, true
	case 'r':
		return append(b, '\r'), i + 2, true
	case 't':
		return append(b, '\t'), i + 2, true
	case 'u':
		r := s.hex4(i)
		if r < 0 {
			return b, i, false
		}
		i += 6
		if utf16.IsSurrogate(r) {
			if pair := utf16.DecodeRune(r, s.hex4(i)); pair != unicode.ReplacementChar {
				return utf8.AppendRune(b, pair), i + 6, true
			}
			r = unicode.ReplacementChar
		}
		return utf8.AppendRune(b, r), i, true
	}
	return b, i, false
}

// hex4 is the code unit of the \uXXXX escape at i, or -1.
func (s *jsonScanner) hex4(i int) rune {
	if i+6 > len(s.src) || s.src[i] != '\\' || s.src[i+1] != 'u' {
		return -1
	}
	var r rune
	for j := i + 2; j < i+6; j++ {
		switch c := s.src[j]; {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return -1
		}
	}
	return r
}
