// Package docs holds nemo's documentation beyond the README (markdown
// files beside this one) and the test that keeps its commands honest:
// every shell command in README.md, docs/*.md and k8s/README.md, in a
// fenced block or as an inline `go test` / `go run` / `go build`, is run
// by TestDocumentedCommands (nemo commands against a real nemo binary),
// checked against the suite (`go test` commands name tests and benchmarks
// that exist), or named in its short allow-list with the reason it cannot
// run here. A bash block marked "<!-- docs_test: bash against nemo; prints
// X -->" runs whole as a script against a nemo started for it
// (TestScriptBlocks: the Azure SAS and curl example), and the Go test
// helper of emulator.md is testdata/nemotest, verbatim, whose tests
// TestEmulatorExample runs against a nemo built from the tree.
package docs
