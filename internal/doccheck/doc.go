// Package doccheck holds the commands the documentation shows to what runs
// them. Its test reads every shell command of README.md and docs/*.md (the
// lines of ```sh, ```bash, ```shell and ```console blocks, and the inline
// code that starts with a program's name and gives it arguments) and fails
// for a command that no rule of its list covers, or that names what does
// not exist: a make target `make -n` does not know, a keepctl command or
// flag, or a keepnode flag, that their -help does not list, a test or
// benchmark a `go test` pattern matches nothing of, a flag a `go run`
// program does not define, a route of the HTTP API openapi.json does not
// have. Each rule says what runs its commands: .ci/run, a Makefile target
// CI runs, a named test (which `make test` runs), this test itself, or
// nothing, with the reason (a container engine, a service manager). A rule
// no command matches any more fails too, so the list stays the docs'.
package doccheck
