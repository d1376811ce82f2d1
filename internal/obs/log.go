package obs

import "log/slog"

// LogDurations is the slog.HandlerOptions.ReplaceAttr of nemo's loggers: it
// writes every time.Duration value as its String() ("1.502s", "250ms").
// slog's JSON handler would write a Duration as an integer of nanoseconds,
// which a reader takes for a count; its text handler writes String()
// already, so with this both formats agree. Call sites log a Duration as
// it is (slog.Duration, or the value after its key), never its String().
func LogDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
