package config

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestParseByteSize(t *testing.T) {
	valid := []struct {
		in   string
		want ByteSize
	}{
		{"0", 0},
		{"4096", 4096},
		{"1B", 1},
		{"1b", 1},
		{"1KB", 1000},
		{"1kb", 1000},
		{"1KiB", 1024},
		{"1Ki", 1024},
		{"256MiB", 256 << 20},
		{"256mib", 256 << 20},
		{"256Mi", 256 << 20},
		{"256 MiB", 256 << 20},
		{"  64MB  ", 64e6},
		{"2GB", 2e9},
		{"2GiB", 2 << 30},
		{"1TB", 1e12},
		{"1TiB", 1 << 40},
		{"1.5GiB", 3 << 29},
		{"1.5KB", 1500},
		{"0.5KiB", 512},
		{"007", 7},
		{"9223372036854775807", math.MaxInt64},
		{"9223372036854775807B", math.MaxInt64},
	}
	for _, tc := range valid {
		got, err := ParseByteSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}

	invalid := []struct{ in, msg string }{
		{"", `byte size "": want a non-negative number with an optional unit B, KB, KiB, MB, MiB, GB, GiB, TB or TiB`},
		{"MiB", `byte size "MiB": want a non-negative`},
		{"-1", `byte size "-1": want a non-negative`},
		{"+1", `byte size "+1": want a non-negative`},
		{"1..5MiB", `byte size "1..5MiB": want`},
		{".5MiB", `byte size ".5MiB": want`},
		{"5.MiB", `byte size "5.MiB": want`},
		{"1e3", `byte size "1e3": unknown unit "e3"`},
		{"0x10", `byte size "0x10": unknown unit "x10"`},
		{"1/2", `byte size "1/2": unknown unit "/2"`},
		{"10 M", `byte size "10 M": unknown unit "M"`},
		{"10PB", `byte size "10PB": unknown unit "PB"`},
		{"1 2", `byte size "1 2": unknown unit "2"`},
		{"0.5B", `byte size "0.5B" is not a whole number of bytes`},
		{"1.0001KB", `byte size "1.0001KB" is not a whole number of bytes`},
		{"9223372036854775808", `byte size "9223372036854775808" exceeds 9223372036854775807 bytes`},
		{"8388608TiB", `byte size "8388608TiB" exceeds 9223372036854775807 bytes`},
	}
	for _, tc := range invalid {
		got, err := ParseByteSize(tc.in)
		if err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want error", tc.in, got)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.msg) {
			t.Errorf("ParseByteSize(%q) error %q, want prefix %q", tc.in, err, tc.msg)
		}
	}
}

func TestByteSizeString(t *testing.T) {
	for _, tc := range []struct {
		in   ByteSize
		want string
	}{
		{0, "0B"},
		{1, "1B"},
		{1023, "1023B"},
		{1024, "1KiB"},
		{1000, "1KB"},
		{1500, "1500B"},
		{256 * MiB, "256MiB"},
		{64e6, "64MB"},
		{3 << 29, "1536MiB"},
		{2 * TiB, "2TiB"},
		{8 * KiB, "8KiB"},
		{2097152 + 8192, "2056KiB"},
		{-5, "-5B"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(tc.in), got, tc.want)
		}
		if tc.in >= 0 {
			if back, err := ParseByteSize(tc.want); err != nil || back != tc.in {
				t.Errorf("ParseByteSize(%q) = %d, %v; want %d", tc.want, back, err, int64(tc.in))
			}
		}
	}
}

func TestByteSizeText(t *testing.T) {
	text, err := (256 * MiB).MarshalText()
	if err != nil || string(text) != "256MiB" {
		t.Fatalf("MarshalText = %q, %v", text, err)
	}
	var b ByteSize
	if err := b.UnmarshalText([]byte("1.5KiB")); err != nil || b != 1536 {
		t.Fatalf("UnmarshalText(1.5KiB) = %d, %v", b, err)
	}
	b = 7
	if err := b.UnmarshalText([]byte("lots")); err == nil || b != 7 {
		t.Fatalf("UnmarshalText(lots) = %d, %v; want error and value unchanged", b, err)
	}
}

func TestByteSizeHook(t *testing.T) {
	hook := ByteSizeHookFunc()
	to := reflect.TypeFor[ByteSize]()
	for _, tc := range []struct {
		in      any
		want    ByteSize
		wantErr string
	}{
		{"4MiB", 4 * MiB, ""},
		{4096, 4096, ""},
		{uint64(10), 10, ""},
		{1e9, 1e9, ""},
		{ByteSize(5), 5, ""},
		{-1, 0, "byte size -1 is negative"},
		{uint64(math.MaxUint64), 0, "byte size 18446744073709551615 exceeds 9223372036854775807 bytes"},
		{1.5, 0, "byte size 1.5 is not a non-negative whole number of bytes"},
		{-2.0, 0, "byte size -2 is not a non-negative whole number of bytes"},
		{"x", 0, `byte size "x": want a non-negative`},
	} {
		got, err := hook(reflect.TypeOf(tc.in), to, tc.in)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("hook(%v) error %v, want %q", tc.in, err, tc.wantErr)
			}
		case err != nil || got != tc.want:
			t.Errorf("hook(%v) = %v, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	// Other target types pass through untouched.
	if got, err := hook(reflect.TypeFor[string](), reflect.TypeFor[string](), "4MiB"); err != nil || got != "4MiB" {
		t.Errorf("hook to string = %v, %v", got, err)
	}
}

func FuzzParseByteSize(f *testing.F) {
	for _, s := range []string{"256MiB", "1.5GiB", "0", "4096", " 8 kb ", "9223372036854775807", "1e3", "-1", "0.5B", "1..2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseByteSize(s)
		if err != nil {
			return
		}
		if b < 0 {
			t.Fatalf("ParseByteSize(%q) = %d, negative", s, b)
		}
		// String is canonical and round-trips.
		str := b.String()
		back, err := ParseByteSize(str)
		if err != nil || back != b {
			t.Fatalf("ParseByteSize(%q) = %d; String %q parses to %d, %v", s, b, str, back, err)
		}
		if again := back.String(); again != str {
			t.Fatalf("String not canonical: %q then %q", str, again)
		}
	})
}
