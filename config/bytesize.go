package config

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strings"

	"github.com/go-viper/mapstructure/v2"
)

// ByteSize is a number of bytes. In configuration it is written as a
// non-negative number with an optional unit: decimal (KB, MB, GB, TB: powers
// of 1000) or binary (KiB, MiB, GiB, TiB, or the Kubernetes spellings Ki, Mi,
// Gi, Ti: powers of 1024), case-insensitive; a bare number or the unit B means
// bytes. A fraction is allowed when the result is a whole number of bytes
// ("1.5GiB", but not "0.5B").
type ByteSize int64

// Common sizes, for defaults and tests.
const (
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
	GiB ByteSize = 1 << 30
	TiB ByteSize = 1 << 40
)

// byteUnits maps a lower-cased unit to its multiplier.
var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40,
}

// errByteSyntax is the shared explanation for malformed sizes.
var errByteSyntax = errors.New("want a non-negative number with an optional unit B, KB, KiB, MB, MiB, GB, GiB, TB or TiB")

// ParseByteSize parses a size such as "256MiB", "1.5 GB" or "4096".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	// Split the number from the unit by hand so that only plain decimals
	// reach big.Rat (which would also accept "1/2", "1e3" and "0x10").
	i, dots := 0, 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		if t[i] == '.' {
			dots++
		}
		i++
	}
	num, rawUnit := t[:i], strings.TrimSpace(t[i:])
	if num == "" || dots > 1 || num[0] == '.' || num[len(num)-1] == '.' {
		return 0, fmt.Errorf("byte size %q: %w", s, errByteSyntax)
	}
	mult, ok := byteUnits[strings.ToLower(rawUnit)]
	if !ok {
		return 0, fmt.Errorf("byte size %q: unknown unit %q: %w", s, rawUnit, errByteSyntax)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("byte size %q: %w", s, errByteSyntax)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("byte size %q is not a whole number of bytes", s)
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("byte size %q exceeds %d bytes", s, int64(math.MaxInt64))
	}
	return ByteSize(r.Num().Int64()), nil
}

// String formats b with whichever unit divides it exactly and gives the
// smallest number, so 256MiB prints as "256MiB", 64e6 as "64MB", and
// ParseByteSize(b.String()) returns b.
func (b ByteSize) String() string {
	num, unit := int64(b), "B"
	if b > 0 {
		for _, u := range [...]struct {
			name string
			mult int64
		}{
			{"TiB", 1 << 40}, {"TB", 1e12}, {"GiB", 1 << 30}, {"GB", 1e9},
			{"MiB", 1 << 20}, {"MB", 1e6}, {"KiB", 1 << 10}, {"KB", 1e3},
		} {
			if int64(b)%u.mult == 0 && int64(b)/u.mult < num {
				num, unit = int64(b)/u.mult, u.name
			}
		}
	}
	return fmt.Sprintf("%d%s", num, unit)
}

// MarshalText implements encoding.TextMarshaler, so YAML output reads "256MiB".
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler using ParseByteSize.
func (b *ByteSize) UnmarshalText(text []byte) error {
	v, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

var byteSizeType = reflect.TypeFor[ByteSize]()

// ByteSizeHookFunc is a mapstructure decode hook (pass it to viper with
// viper.DecodeHook) that turns strings such as "256MiB" into a ByteSize.
// Integers are taken as bytes; negative numbers and non-integral floats are
// refused here rather than wrapping around.
func ByteSizeHookFunc() mapstructure.DecodeHookFuncType {
	return func(from, to reflect.Type, data any) (any, error) {
		if to != byteSizeType || from == byteSizeType {
			return data, nil
		}
		v := reflect.ValueOf(data)
		switch {
		case from.Kind() == reflect.String:
			return ParseByteSize(v.String())
		case v.CanInt():
			if v.Int() < 0 {
				return nil, fmt.Errorf("byte size %d is negative", v.Int())
			}
			return ByteSize(v.Int()), nil
		case v.CanUint():
			if v.Uint() > math.MaxInt64 {
				return nil, fmt.Errorf("byte size %d exceeds %d bytes", v.Uint(), int64(math.MaxInt64))
			}
			return ByteSize(v.Uint()), nil
		case v.CanFloat():
			// YAML reads 1e9 as a float.
			f := v.Float()
			if f < 0 || f != math.Trunc(f) || f >= math.MaxInt64 {
				return nil, fmt.Errorf("byte size %v is not a non-negative whole number of bytes", f)
			}
			return ByteSize(f), nil
		}
		return data, nil
	}
}
