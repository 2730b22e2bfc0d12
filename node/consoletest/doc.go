// Package consoletest tests the operator console (node.Config.Console) over
// HTTP and in a real browser, apart from package node so that the browser
// and its driver do not slow that package's tests.
package consoletest
