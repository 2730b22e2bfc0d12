package sim

// regressions are seeds that failed once. TestRegressions runs them all on
// every test run; each must pass. When TestSim reports a failing seed, find
// the cause, fix it (in the model or the code under test), then add the
// seed here with what it found.
var regressions = []struct {
	seed uint64
	why  string
}{
	// Found while building the model (then as seeds 3, 10, 14 and 15): a
	// node paused between checking its hold and sending its upload; the
	// upload landed after another node took over (and, unless that node had
	// uploaded, became the state as a late commit), and the node then
	// deleted the entry it replaced, which the newer holder's state named.
	// Fixed in the executor: an upload that returns after the hold lapsed is
	// not a success. These seeds caught the unfixed executor
	// (the variant TrustLateUploads) in the model of that time; the model has
	// grown since, and TestMutations/TrustLateUploads names the seeds that
	// catch it now.
	{4, "upload counted after the hold lapsed, then DeleteAfterReplicate"},
	{5, "upload counted after the hold lapsed, then DeleteAfterReplicate"},
	{11, "upload counted after the hold lapsed, then DeleteAfterReplicate"},
}
