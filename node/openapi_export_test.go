package node

// RoutePatterns are the patterns of n's HTTP API, as its mux has them
// ("METHOD /path").
func RoutePatterns(n *Node) []string {
	var out []string
	for _, rt := range n.routes() {
		out = append(out, rt.pattern)
	}
	return out
}
