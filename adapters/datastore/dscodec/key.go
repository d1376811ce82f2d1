package dscodec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
)

// Key encoding. A path is the concatenation of its elements; an element is
//
//	escaped(kind) 0x00 0x01  then  0x01 id(8 bytes)  or  0x02 escaped(name) 0x00 0x01
//
// where escaped() writes a 0x00 byte as 0x00 0xFF and id is the int64 with
// its sign bit flipped, big-endian, so ids compare numerically. Every element
// encoding is prefix-free and compares like the element itself (the kind
// first; the id tag 0x01 sorts before the name tag 0x02; names by bytes,
// the 0x00 0x01 terminator sorting before any continuation), so comparing
// two encoded paths byte-wise compares them element by element, and a path
// that is a prefix of another (a parent) sorts first.
const (
	escByte  = 0x00
	escTerm  = 0x01 // 0x00 0x01 ends a string
	escZero  = 0xFF // 0x00 0xFF is a literal 0x00
	tagID    = 0x01
	tagName  = 0x02
	idLen    = 8
	signFlip = 1 << 63
)

// Errors of the key codec, compared with errors.Is.
var (
	// ErrIncompleteKey: a path element has neither an id nor a name.
	ErrIncompleteKey = errors.New("dscodec: incomplete key")
	// ErrInvalidKey: a key or an encoded key is malformed.
	ErrInvalidKey = errors.New("dscodec: invalid key")
)

// EncodePath encodes a complete key path.
func EncodePath(path []*datastorepb.Key_PathElement) ([]byte, error) {
	if len(path) == 0 {
		return nil, fmt.Errorf("%w: empty path", ErrInvalidKey)
	}
	out := make([]byte, 0, 16*len(path))
	for i, e := range path {
		var err error
		if out, err = appendElement(out, e); err != nil {
			return nil, fmt.Errorf("path element %d: %w", i, err)
		}
	}
	return out, nil
}

// EncodeKey encodes k's path; the partition is the keyspace's business.
func EncodeKey(k *datastorepb.Key) ([]byte, error) {
	if k == nil {
		return nil, fmt.Errorf("%w: nil key", ErrInvalidKey)
	}
	return EncodePath(k.GetPath())
}

func appendElement(out []byte, e *datastorepb.Key_PathElement) ([]byte, error) {
	if e == nil || e.GetKind() == "" {
		return nil, fmt.Errorf("%w: empty kind", ErrInvalidKey)
	}
	if !utf8.ValidString(e.GetKind()) {
		return nil, fmt.Errorf("%w: kind is not UTF-8", ErrInvalidKey)
	}
	out = appendString(out, e.GetKind())
	switch id := e.IdType.(type) {
	case *datastorepb.Key_PathElement_Id:
		if id.Id == 0 {
			return nil, ErrIncompleteKey
		}
		out = append(out, tagID)
		return binary.BigEndian.AppendUint64(out, uint64(id.Id)^signFlip), nil
	case *datastorepb.Key_PathElement_Name:
		if id.Name == "" {
			return nil, ErrIncompleteKey
		}
		if !utf8.ValidString(id.Name) {
			return nil, fmt.Errorf("%w: name is not UTF-8", ErrInvalidKey)
		}
		return appendString(append(out, tagName), id.Name), nil
	default:
		return nil, ErrIncompleteKey
	}
}

func appendString(out []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == escByte {
			out = append(out, escByte, escZero)
		} else {
			out = append(out, s[i])
		}
	}
	return append(out, escByte, escTerm)
}

// DecodePath inverts EncodePath; it accepts only canonical encodings, so
// decode(encode(p)) == p and encode(decode(b)) == b.
func DecodePath(b []byte) ([]*datastorepb.Key_PathElement, error) {
	path, rest, err := decodePrefix(b)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 || len(path) == 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrInvalidKey, len(rest))
	}
	return path, nil
}

// DecodePrefix decodes the longest run of whole elements at the start of b
// and returns them with the bytes left over. It never fails: where b stops
// being a canonical encoding, the rest begins. The Store adapter uses it to
// turn an arbitrary byte bound (such as adapters.Successor of a key) into a
// Datastore key bound.
func DecodePrefix(b []byte) (path []*datastorepb.Key_PathElement, rest []byte) {
	path, rest, _ = decodePrefix(b)
	return path, rest
}

func decodePrefix(b []byte) ([]*datastorepb.Key_PathElement, []byte, error) {
	var path []*datastorepb.Key_PathElement
	for len(b) > 0 {
		e, n, err := decodeElement(b)
		if err != nil {
			return path, b, err
		}
		path = append(path, e)
		b = b[n:]
	}
	return path, b, nil
}

func decodeElement(b []byte) (*datastorepb.Key_PathElement, int, error) {
	kind, n, err := decodeString(b)
	if err != nil {
		return nil, 0, fmt.Errorf("kind: %w", err)
	}
	if n >= len(b) {
		return nil, 0, fmt.Errorf("%w: element without id or name", ErrInvalidKey)
	}
	e := &datastorepb.Key_PathElement{Kind: kind}
	switch b[n] {
	case tagID:
		if len(b) < n+1+idLen {
			return nil, 0, fmt.Errorf("%w: short id", ErrInvalidKey)
		}
		id := int64(binary.BigEndian.Uint64(b[n+1:]) ^ signFlip)
		if id == 0 {
			return nil, 0, ErrIncompleteKey
		}
		e.IdType = &datastorepb.Key_PathElement_Id{Id: id}
		return e, n + 1 + idLen, nil
	case tagName:
		name, m, err := decodeString(b[n+1:])
		if err != nil {
			return nil, 0, fmt.Errorf("name: %w", err)
		}
		e.IdType = &datastorepb.Key_PathElement_Name{Name: name}
		return e, n + 1 + m, nil
	default:
		return nil, 0, fmt.Errorf("%w: bad id tag %#x", ErrInvalidKey, b[n])
	}
}

// decodeString reads one escaped, terminated, non-empty UTF-8 string.
func decodeString(b []byte) (string, int, error) {
	var sb []byte
	for i := 0; i < len(b); i++ {
		if b[i] != escByte {
			sb = append(sb, b[i])
			continue
		}
		if i+1 >= len(b) {
			break
		}
		switch b[i+1] {
		case escTerm:
			if len(sb) == 0 {
				return "", 0, fmt.Errorf("%w: empty string", ErrInvalidKey)
			}
			if !utf8.Valid(sb) {
				return "", 0, fmt.Errorf("%w: not UTF-8", ErrInvalidKey)
			}
			return string(sb), i + 2, nil
		case escZero:
			sb = append(sb, 0)
			i++
		default:
			return "", 0, fmt.Errorf("%w: bad escape %#x", ErrInvalidKey, b[i+1])
		}
	}
	return "", 0, fmt.Errorf("%w: unterminated string", ErrInvalidKey)
}

// SubtreeEnd returns the smallest byte string above the encoded key k and
// every descendant of it, and below every other key greater than k: k
// followed by 0xFF (a descendant's next byte starts a kind, which is UTF-8 or
// an escaped zero, never 0xFF). [k, SubtreeEnd(k)) is an ancestor query's
// range.
func SubtreeEnd(k []byte) []byte {
	out := make([]byte, len(k)+1)
	copy(out, k)
	out[len(k)] = 0xFF
	return out
}
