package tablecodec

import (
	"errors"
	"fmt"
)

// Key layout: escaped(PartitionKey) ‖ 0x00 0x01 ‖ escaped(RowKey).
//
// Escaping maps every 0x00 byte to 0x00 0xFF and leaves other bytes alone, so
// an escaped string never contains 0x00 followed by anything but 0xFF. The
// terminator 0x00 0x01 therefore sorts below every continuation of the
// partition key (a longer key continues with either a non-zero byte or with
// 0x00 0xFF), which is what makes a partition key that is a prefix of another
// sort first, exactly like ordinal string comparison. The row key needs no
// terminator: it runs to the end of the key, and escaping preserves byte
// order and the prefix relation.
const (
	escByte  = 0x00
	escZero  = 0xFF // 0x00 0xFF encodes a literal 0x00
	termByte = 0x01 // 0x00 0x01 ends the partition key
	endByte  = 0x02 // 0x00 0x02 is just above every key of a partition
)

// ErrBadKey reports an encoded key that EncodeKey cannot have produced.
var ErrBadKey = errors.New("tablecodec: malformed encoded key")

func appendEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == escByte {
			dst = append(dst, escByte, escZero)
			continue
		}
		dst = append(dst, s[i])
	}
	return dst
}

func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if s[i] == escByte {
			n++
		}
	}
	return n
}

// EncodeKey returns the order-preserving key of (pk, rk). Empty strings are
// legal for both, as in Azure.
func EncodeKey(pk, rk string) []byte {
	k := make([]byte, 0, escapedLen(pk)+2+escapedLen(rk))
	k = appendEscaped(k, pk)
	k = append(k, escByte, termByte)
	return appendEscaped(k, rk)
}

// PartitionPrefix returns the prefix shared by every key of partition pk and
// by no key of any other partition. It is also the smallest key of the
// partition (the key of the empty RowKey).
func PartitionPrefix(pk string) []byte {
	k := make([]byte, 0, escapedLen(pk)+2)
	k = appendEscaped(k, pk)
	return append(k, escByte, termByte)
}

// PartitionEnd returns the exclusive upper bound of partition pk: greater
// than every key of pk and not greater than any key of a larger partition.
func PartitionEnd(pk string) []byte {
	k := make([]byte, 0, escapedLen(pk)+2)
	k = appendEscaped(k, pk)
	return append(k, escByte, endByte)
}

// DecodeKey inverts EncodeKey. It rejects (with ErrBadKey) any byte string
// EncodeKey cannot produce, so decode(k) re-encodes to exactly k.
func DecodeKey(k []byte) (pk, rk string, err error) {
	buf := make([]byte, 0, len(k))
	i := 0
	for ; ; i++ {
		if i >= len(k) {
			return "", "", fmt.Errorf("%w: no partition key terminator", ErrBadKey)
		}
		if k[i] != escByte {
			buf = append(buf, k[i])
			continue
		}
		if i+1 >= len(k) {
			return "", "", fmt.Errorf("%w: dangling escape at %d", ErrBadKey, i)
		}
		i++
		if k[i] == termByte {
			break
		}
		if k[i] != escZero {
			return "", "", fmt.Errorf("%w: bad escape 0x00 0x%02x at %d", ErrBadKey, k[i], i-1)
		}
		buf = append(buf, escByte)
	}
	pk = string(buf)
	buf = buf[:0]
	for i++; i < len(k); i++ {
		if k[i] != escByte {
			buf = append(buf, k[i])
			continue
		}
		if i+1 >= len(k) || k[i+1] != escZero {
			return "", "", fmt.Errorf("%w: bad escape in row key at %d", ErrBadKey, i)
		}
		i++
		buf = append(buf, escByte)
	}
	return pk, string(buf), nil
}
