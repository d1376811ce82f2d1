package gql

import (
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// unescaped is what a backslash escape in a string or quoted name stands
// for; \% and \_ keep their backslash.
var unescaped = map[byte]string{
	'\\': `\`, '0': "\x00", 'b': "\b", 'n': "\n", 'r': "\r", 't': "\t", 'Z': "\x1a",
	'%': `\%`, '_': `\_`, '\'': "'", '"': `"`, '`': "`",
}

// unquote returns the text of a lexed string or quoted name: its quotes
// dropped, a doubled quote and backslash escapes resolved.
func unquote(image string) string {
	q := image[0]
	var b strings.Builder
	for i := 1; i < len(image)-1; i++ {
		c := image[i]
		if c == '\\' {
			i++
			b.WriteString(unescaped[image[i]])
			continue
		}
		b.WriteByte(c)
		if c == q {
			i++
		}
	}
	return b.String()
}

// javaNumberError is the message of Java's NumberFormatException, which
// the service's messages quote.
type javaNumberError struct{ text string }

func (e javaNumberError) Error() string { return fmt.Sprintf(`For input string: "%s"`, e.text) }

func parseLong(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, javaNumberError{s}
	}
	return n, nil
}

// parseDouble parses as Java does: out of range is ±Inf or 0, not an
// error.
func parseDouble(s string) (float64, error) {
	d, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, javaNumberError{s}
	}
	return d, nil
}

// blob decodes BLOB('...'): URL-safe base64 without padding.
func (p *parser) blob(text string) *datastorepb.Value {
	b, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil || strings.ContainsAny(text, "\r\n") {
		p.errorf(`Invalid blob text: "%s".`, text)
	}
	if b == nil {
		b = []byte{}
	}
	return &datastorepb.Value{ValueType: &datastorepb.Value_BlobValue{BlobValue: b}}
}

var datetimePattern = regexp.MustCompile(`^([0-9]{4})-([0-9]{2})-([0-9]{2})[tT]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?((?:[+-][0-9]{2}:[0-9]{2})|[zZ])$`)

// datetime parses DATETIME('YYYY-MM-DDThh:mm:ss[.ffffff](Z|±hh:mm)') with
// the service's rules: every field in range, a zero offset written Z, and
// dates before 15 October 1582 in the Julian calendar (Java's
// GregorianCalendar).
func (p *parser) datetime(text string) *datastorepb.Value {
	m := datetimePattern.FindStringSubmatch(text)
	if m == nil {
		p.errorf(`Invalid datetime text (does not match pattern): "%s"`, text)
	}
	num := func(s string) int { n, _ := strconv.Atoi(s); return n }
	y, mo, d, h, mi, s := num(m[1]), num(m[2]), num(m[3]), num(m[4]), num(m[5]), num(m[6])
	micros := 0
	if m[7] != "" {
		micros = num((m[7] + "00000")[:6])
	}
	zone := m[8]
	if zone == "+00:00" || zone == "-00:00" {
		p.errorf(`Invalid datetime text (zero offset must be Z): "%s"`, text)
	}
	offset := 0
	if zone != "Z" && zone != "z" {
		zh, zm := num(zone[1:3]), num(zone[4:6])
		offset = (zh*60 + zm) * 60
		if zone[0] == '-' {
			offset = -offset
		}
		// Java's calendar takes offsets from -13:00 to +14:00.
		if zm > 59 || offset < -13*3600 || offset > 14*3600 {
			p.errorf(`Invalid datetime text (parse failure): "%s"`, text)
		}
	}
	days, ok := civilDays(y, mo, d)
	if !ok || h > 23 || mi > 59 || s > 59 {
		p.errorf(`Invalid datetime text (parse failure): "%s"`, text)
	}
	secs := days*86400 + int64(h*3600+mi*60+s) - int64(offset)
	if secs < minTimestamp || secs > maxTimestamp {
		// The service fails on these without a message (its conversion
		// throws): Julian 0001-01-01 is two days before the first
		// timestamp, and an offset can push a time past either end.
		p.errorf(`Invalid datetime text (out of range): "%s"`, text)
	}
	return &datastorepb.Value{ValueType: &datastorepb.Value_TimestampValue{TimestampValue: timestamppb.New(time.Unix(secs, int64(micros)*1000))}}
}

// The range of timestamps: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
const (
	minTimestamp = -62135596800
	maxTimestamp = 253402300799
)

// civilDays returns the days since 1970-01-01 of a date in Java's
// GregorianCalendar: Gregorian from 1582-10-15, Julian before, the ten days
// between not existing, years from 1.
func civilDays(y, m, d int) (int64, bool) {
	if y < 1 || m < 1 || m > 12 || d < 1 {
		return 0, false
	}
	julian := y < 1582 || y == 1582 && (m < 10 || m == 10 && d < 15)
	if y == 1582 && m == 10 && d > 4 && d < 15 {
		return 0, false
	}
	length := []int{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}[m-1]
	leap := y%4 == 0 && (julian || y%100 != 0 || y%400 == 0)
	if m == 2 && leap {
		length = 29
	}
	if d > length {
		return 0, false
	}
	a := (14 - m) / 12
	yy, mm := int64(y+4800-a), int64(m+12*a-3)
	jdn := int64(d) + (153*mm+2)/5 + 365*yy + yy/4
	if julian {
		jdn -= 32083
	} else {
		jdn += -yy/100 + yy/400 - 32045
	}
	return jdn - 2440588, true
}
