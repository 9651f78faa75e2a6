package gateway

import "google.golang.org/grpc"

// RouteInfo is a REST route of the gateway's route table, for tests that
// must cover every route.
type RouteInfo struct {
	Verb, Pattern, Method, Body string
	Vars                        []string
}

// Routes is the gateway's route table for srv.
func Routes(srv *grpc.Server) ([]RouteInfo, error) {
	t, err := newRouteTable(srv)
	if err != nil {
		return nil, err
	}
	var out []RouteInfo
	for _, r := range t.routes {
		out = append(out, RouteInfo{Verb: r.verb, Pattern: r.pattern(), Method: r.method, Body: r.body, Vars: r.vars})
	}
	return out, nil
}
