package tablecodec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// The reference reader: the encoding/json Decoder.Token walk that
// readJSONObject's scanner replaced, kept as the oracle the differential
// fuzz target (FuzzParseJSONEntity) and the benchmark compare it with. It
// differs from the walk it was only in its output (jsonMember values
// instead of encoding/json's tokens) and in checking annotations without
// a value in body order, where the walk took a map's order.

// refParseJSONEntity is parseJSONEntity on the reference reader.
func refParseJSONEntity(body []byte) (*Entity, int, error) {
	members, err := refReadJSONObject(body)
	if err != nil {
		return nil, 0, err
	}
	return entityOf(members)
}

// refReadJSONObject returns the members other than type annotations, in
// body order, each with the type its annotation gives.
func refReadJSONObject(body []byte) ([]jsonMember, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("%w: payload is not a JSON object", ErrInvalidValue)
	}
	var members []jsonMember
	types := map[string]string{}
	var annotated []string // the keys of types, in body order
	seen := map[string]bool{}
	for dec.More() {
		m, err := refReadJSONMember(dec, seen)
		if err != nil {
			return nil, err
		}
		if base, ok := strings.CutSuffix(m.name, typeSuffix); ok {
			if m.val.kind != jsonString {
				return nil, propErr(base, ErrInvalidValue, "odata.type annotation must be a string")
			}
			types[base] = m.val.text
			annotated = append(annotated, base)
			continue
		}
		members = append(members, m)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("%w: %v", ErrInvalidValue, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrInvalidValue)
	}
	for _, base := range annotated {
		if !seen[base] {
			return nil, propErr(base, ErrInvalidValue, "type annotation without a value")
		}
	}
	for i := range members {
		members[i].typ, members[i].annotated = types[members[i].name]
	}
	return members, nil
}

// refReadJSONMember reads the next name and scalar value of the object
// dec is in; seen holds the names read before it, and gets this one.
func refReadJSONMember(dec *json.Decoder, seen map[string]bool) (jsonMember, error) {
	tok, err := dec.Token()
	if err != nil {
		return jsonMember{}, fmt.Errorf("%w: %v", ErrInvalidValue, err)
	}
	name := tok.(string) // json.Decoder only yields string keys inside an object
	if seen[name] {
		return jsonMember{}, propErr(strings.TrimSuffix(name, typeSuffix), ErrDuplicateProperty, "")
	}
	seen[name] = true
	val, err := dec.Token()
	if err != nil {
		return jsonMember{}, propErr(name, ErrInvalidValue, "%v", err)
	}
	switch v := val.(type) {
	case json.Delim:
		return jsonMember{}, propErr(name, ErrInvalidValue, "objects and arrays are not property values")
	case string:
		return jsonMember{name: name, val: jsonValue{kind: jsonString, text: v}}, nil
	case json.Number:
		return jsonMember{name: name, val: jsonValue{kind: jsonNumber, text: string(v)}}, nil
	case bool:
		return jsonMember{name: name, val: jsonValue{kind: jsonBool, b: v}}, nil
	}
	return jsonMember{name: name}, nil // null
}
