// Package dockerfile reads a Dockerfile's stages for the tests that check
// nemo's image against what runs it: the Kubernetes examples (k8s) and the
// image's own rules (cmd/nemo). It understands what nemo's Dockerfile uses:
// comments, line continuations, FROM with AS, ENV pairs (key=value, quoted
// or not, or the old "ENV key value"), WORKDIR, USER, COPY with its flags,
// and ENTRYPOINT and CMD in exec form. It refuses what it cannot read
// exactly (a variable in ENV or WORKDIR, a shell-form ENTRYPOINT) rather
// than guess what the image would hold.
package dockerfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"unicode"
)

// Instruction is one instruction: its keyword in upper case, its --flags
// and the rest of its line.
type Instruction struct {
	Line    int // where it starts, from 1
	Keyword string
	Flags   []string // "--chown=65532:65532", "--from=build"
	Rest    string   // after the keyword and the flags
}

// Stage is a FROM and the instructions up to the next one.
type Stage struct {
	From, Name   string
	Instructions []Instruction
}

// Read parses the Dockerfile at path.
func Read(path string) ([]Stage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("dockerfile: %w", err)
	}
	return Parse(data)
}

// Parse splits a Dockerfile into its stages.
func Parse(data []byte) ([]Stage, error) {
	var stages []Stage
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		start := i + 1
		text := strings.TrimSpace(lines[i])
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		for strings.HasSuffix(text, `\`) && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") {
				continue // a comment inside a continued instruction
			}
			text = strings.TrimSuffix(text, `\`) + " " + next
		}
		in := split(start, text)
		if in.Keyword == "FROM" {
			f := strings.Fields(in.Rest)
			switch {
			case len(f) == 1:
				stages = append(stages, Stage{From: f[0]})
			case len(f) == 3 && strings.EqualFold(f[1], "AS"):
				stages = append(stages, Stage{From: f[0], Name: f[2]})
			default:
				return nil, fmt.Errorf("dockerfile: line %d: FROM %s", start, in.Rest)
			}
			continue
		}
		if len(stages) == 0 {
			if in.Keyword == "ARG" {
				continue // an ARG before the first FROM
			}
			return nil, fmt.Errorf("dockerfile: line %d: %s before FROM", start, in.Keyword)
		}
		st := &stages[len(stages)-1]
		st.Instructions = append(st.Instructions, in)
	}
	if len(stages) == 0 {
		return nil, errors.New("dockerfile: no FROM")
	}
	return stages, nil
}

func split(line int, text string) Instruction {
	kw, rest, _ := strings.Cut(text, " ")
	in := Instruction{Line: line, Keyword: strings.ToUpper(kw)}
	rest = strings.TrimSpace(rest)
	for strings.HasPrefix(rest, "--") {
		flag, after, _ := strings.Cut(rest, " ")
		in.Flags = append(in.Flags, flag)
		rest = strings.TrimSpace(after)
	}
	in.Rest = rest
	return in
}

// Final is the last stage: the image.
func Final(stages []Stage) Stage { return stages[len(stages)-1] }

// Env is the stage's ENV settings, later ones overriding earlier ones.
func (s Stage) Env() (map[string]string, error) {
	env := map[string]string{}
	for _, in := range s.of("ENV") {
		pairs, err := envPairs(in.Rest)
		if err != nil {
			return nil, fmt.Errorf("dockerfile: line %d: ENV %s: %w", in.Line, in.Rest, err)
		}
		for i := 0; i < len(pairs); i += 2 {
			env[pairs[i]] = pairs[i+1]
		}
	}
	return env, nil
}

// envPairs reads "k=v k2='v 2'" or the old "k the value", as key, value,
// key, value.
func envPairs(rest string) ([]string, error) {
	if strings.Contains(rest, "$") {
		return nil, errors.New("variables are not expanded here")
	}
	words, err := words(rest)
	if err != nil {
		return nil, err
	}
	if len(words) == 0 {
		return nil, errors.New("nothing set")
	}
	if !strings.Contains(words[0], "=") {
		k, v, _ := strings.Cut(rest, " ")
		return []string{k, strings.TrimSpace(v)}, nil
	}
	var out []string
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", w)
		}
		out = append(out, k, v)
	}
	return out, nil
}

// words splits s at unquoted spaces, removing the quotes.
func words(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case unicode.IsSpace(r):
			if in {
				out, in = append(out, cur.String()), false
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, errors.New("unterminated quote")
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

// Workdir is the stage's working directory after its WORKDIRs ("" if it
// sets none: the base image's then applies).
func (s Stage) Workdir() (string, error) {
	dir := ""
	for _, in := range s.of("WORKDIR") {
		if strings.Contains(in.Rest, "$") || in.Rest == "" {
			return "", fmt.Errorf("dockerfile: line %d: WORKDIR %q", in.Line, in.Rest)
		}
		if path.IsAbs(in.Rest) {
			dir = path.Clean(in.Rest)
		} else {
			dir = path.Join("/", dir, in.Rest)
		}
	}
	return dir, nil
}

// User is the stage's last USER as user and group ("" for a part not set).
func (s Stage) User() (user, group string) {
	us := s.of("USER")
	if len(us) == 0 {
		return "", ""
	}
	user, group, _ = strings.Cut(us[len(us)-1].Rest, ":")
	return user, group
}

// Entrypoint is the stage's last ENTRYPOINT, nil if none.
func (s Stage) Entrypoint() ([]string, error) { return s.exec("ENTRYPOINT") }

// Cmd is the stage's last CMD, nil if none.
func (s Stage) Cmd() ([]string, error) { return s.exec("CMD") }

func (s Stage) exec(kw string) ([]string, error) {
	ins := s.of(kw)
	if len(ins) == 0 {
		return nil, nil
	}
	in := ins[len(ins)-1]
	var argv []string
	if err := json.Unmarshal([]byte(in.Rest), &argv); err != nil {
		return nil, fmt.Errorf("dockerfile: line %d: %s must be in exec form (a JSON array): %w", in.Line, kw, err)
	}
	return argv, nil
}

// Copies is the stage's COPY instructions.
func (s Stage) Copies() []Instruction { return s.of("COPY") }

// Flag is the value of in's --name flag and whether it is there.
func (in Instruction) Flag(name string) (string, bool) {
	for _, f := range in.Flags {
		if v, ok := strings.CutPrefix(f, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// Dest is a COPY's destination, its last word.
func (in Instruction) Dest() string {
	f := strings.Fields(in.Rest)
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

func (s Stage) of(kw string) []Instruction {
	var out []Instruction
	for _, in := range s.Instructions {
		if in.Keyword == kw {
			out = append(out, in)
		}
	}
	return out
}

// ID parses a numeric user or group id; ok is false for a name.
func ID(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 0
}

// Runs is the stage's RUN instructions (shell form, as written).
func (s Stage) Runs() []Instruction { return s.of("RUN") }

// Args is the stage's ARG declarations: each name with its default ("" when
// it has none).
func (s Stage) Args() map[string]string {
	out := map[string]string{}
	for _, in := range s.of("ARG") {
		name, def, _ := strings.Cut(strings.TrimSpace(in.Rest), "=")
		out[name] = def
	}
	return out
}
