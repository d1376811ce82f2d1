package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nemocache/nemo/config"
)

// TestLoggerWritesDurations: the logger nemo builds writes a Duration
// attribute as a duration ("1.502s"), in a group too, in the JSON format
// (slog alone writes 1502000000, nanoseconds) and the text format alike.
func TestLoggerWritesDurations(t *testing.T) {
	logLine := func(format config.LogFormat) string {
		var buf bytes.Buffer
		log := newLogger(config.Log{Level: "info", Format: format}, &buf)
		log.Info("checkpoint", "took", 1502*time.Millisecond, slog.Group("retry", slog.Duration("in", 250*time.Millisecond)), "records", 3)
		return buf.String()
	}
	var rec struct {
		Took    any `json:"took"`
		Records any `json:"records"`
		Retry   struct {
			In any `json:"in"`
		} `json:"retry"`
	}
	line := logLine(config.LogFormatJSON)
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	if rec.Took != "1.502s" || rec.Retry.In != "250ms" || rec.Records != 3.0 {
		t.Errorf("JSON: took %#v, retry.in %#v, records %#v; want \"1.502s\", \"250ms\", 3:\n%s", rec.Took, rec.Retry.In, rec.Records, line)
	}
	line = logLine(config.LogFormatText)
	if !strings.Contains(line, " took=1.502s ") || !strings.Contains(line, " retry.in=250ms ") || !strings.Contains(line, " records=3") {
		t.Errorf("text: want took=1.502s retry.in=250ms records=3:\n%s", line)
	}
}
