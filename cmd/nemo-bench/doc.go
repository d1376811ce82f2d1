// Command nemo-bench runs the Nemo paper's experiments against nemo's
// engine or, through nemo's own frontends, against Azurite and the
// Datastore emulator, and writes a markdown table per experiment and a PNG
// plot per figure (package bench, under internal/). It is a binary of its own so
// that the sidecar, cmd/nemo, links no benchmark or plotting code
// (TestSidecarLinksNoBenchmark in cmd/nemo checks it). Exit status: 0 done,
// 1 a run failed, 2 a bad command line.
package main
