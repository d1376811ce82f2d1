package dockerfile

import (
	"maps"
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	stages, err := Parse([]byte(`# comment
ARG BASE=x
FROM golang:1 AS build
ENV A=1
ARG V=dev
ARG C
RUN go build \
  # a comment inside
  -o /out/x .
FROM --platform=linux/amd64 base:2
COPY --from=build --chown=7:8 /out/d /var/lib/x
ENV B=2 C="two words" \
    D='q'
ENV E the old form
WORKDIR /var
WORKDIR lib/x
USER 7:8
ENTRYPOINT ["/x"]
CMD ["serve", "--flag"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 || stages[0].Name != "build" || stages[1].From != "base:2" {
		t.Fatalf("stages %+v", stages)
	}
	img := Final(stages)
	env, err := img.Env()
	if want := map[string]string{"B": "2", "C": "two words", "D": "q", "E": "the old form"}; err != nil || !maps.Equal(env, want) {
		t.Errorf("Env = %v, %v; want %v (the build stage's A is not the image's)", env, err, want)
	}
	if wd, err := img.Workdir(); wd != "/var/lib/x" || err != nil {
		t.Errorf("Workdir = %q, %v", wd, err)
	}
	if u, g := img.User(); u != "7" || g != "8" {
		t.Errorf("User = %q:%q", u, g)
	}
	ep, _ := img.Entrypoint()
	cmd, _ := img.Cmd()
	if !slices.Equal(ep, []string{"/x"}) || !slices.Equal(cmd, []string{"serve", "--flag"}) {
		t.Errorf("Entrypoint %q, Cmd %q", ep, cmd)
	}
	cp := img.Copies()
	if owner, ok := cp[0].Flag("chown"); len(cp) != 1 || !ok || owner != "7:8" || cp[0].Dest() != "/var/lib/x" {
		t.Errorf("Copies = %+v", cp)
	}
	if r := stages[0].Runs(); len(r) != 1 || r[0].Rest != "go build  -o /out/x ." {
		t.Errorf("continued RUN = %+v", r)
	}
	if a := stages[0].Args(); !maps.Equal(a, map[string]string{"V": "dev", "C": ""}) {
		t.Errorf("Args = %v (the ARG before FROM is no stage's)", a)
	}
}

// TestParseRefuses: what the parser cannot read exactly is an error, not a
// guess.
func TestParseRefuses(t *testing.T) {
	for name, df := range map[string]string{
		"no FROM":          "ENV A=1\n",
		"empty FROM":       "FROM\n",
		"variable in ENV":  "FROM x\nENV A=$B\n",
		"unclosed quote":   "FROM x\nENV A=\"b\n",
		"variable WORKDIR": "FROM x\nWORKDIR $HOME\n",
		"shell ENTRYPOINT": "FROM x\nENTRYPOINT /x serve\n",
	} {
		stages, err := Parse([]byte(df))
		if err == nil {
			img := Final(stages)
			_, err1 := img.Env()
			_, err2 := img.Workdir()
			_, err3 := img.Entrypoint()
			err = firstErr(err1, err2, err3)
		}
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
