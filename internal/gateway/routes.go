package gateway

import (
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// route is one REST binding of an RPC (a google.api.http rule): what the
// front door needs to know of it before vanguard routes the call.
type route struct {
	verb   string // HTTP method
	method string // gRPC full method, /pkg.Service/Method
	// segments of the path template: a literal, or "" for a single-segment
	// variable ({field} or {field=*}).
	segments []string
	vars     []string // the fields the path binds, in order
	suffix   string   // the custom verb, ":transition", or ""
	// body is the rule's body: "*" (the whole message), a field, or ""
	// (no body: the fields the path does not bind come from the query).
	body string
}

// routeTable is every REST route of the services registered on a server.
type routeTable struct {
	routes []route
	// rpc holds the full method names, for telling a Connect, gRPC or
	// gRPC-Web path from a REST one.
	rpc map[string]bool
}

// newRouteTable reads the google.api.http rules of every method of srv's
// services. A template the front door cannot read (a multi-segment
// variable, a nested field) is an error: the gateway must not serve a
// route whose path fields it cannot hold to the path-first rule.
func newRouteTable(srv *grpc.Server) (*routeTable, error) {
	t := &routeTable{rpc: map[string]bool{}}
	for name, info := range srv.GetServiceInfo() {
		for _, m := range info.Methods {
			t.rpc["/"+name+"/"+m.Name] = true
		}
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			continue // no descriptor, no REST routes (vanguard needs one too)
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			continue
		}
		for i := range sd.Methods().Len() {
			md := sd.Methods().Get(i)
			rule, ok := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
			if !ok || rule == nil {
				continue
			}
			full := "/" + name + "/" + string(md.Name())
			for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
				rt, err := parseRule(full, r)
				if err != nil {
					return nil, err
				}
				t.routes = append(t.routes, rt)
			}
		}
	}
	return t, nil
}

func parseRule(method string, r *annotations.HttpRule) (route, error) {
	rt := route{method: method, body: r.GetBody()}
	var tmpl string
	switch p := r.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		rt.verb, tmpl = http.MethodGet, p.Get
	case *annotations.HttpRule_Post:
		rt.verb, tmpl = http.MethodPost, p.Post
	case *annotations.HttpRule_Put:
		rt.verb, tmpl = http.MethodPut, p.Put
	case *annotations.HttpRule_Patch:
		rt.verb, tmpl = http.MethodPatch, p.Patch
	case *annotations.HttpRule_Delete:
		rt.verb, tmpl = http.MethodDelete, p.Delete
	case *annotations.HttpRule_Custom:
		rt.verb, tmpl = p.Custom.GetKind(), p.Custom.GetPath()
	default:
		return rt, fmt.Errorf("gateway: %s: an http rule without a pattern", method)
	}
	if i := strings.LastIndex(tmpl, ":"); i > strings.LastIndex(tmpl, "}") {
		tmpl, rt.suffix = tmpl[:i], tmpl[i:]
	}
	for seg := range strings.SplitSeq(strings.TrimPrefix(tmpl, "/"), "/") {
		if v, ok := strings.CutPrefix(seg, "{"); ok {
			v = strings.TrimSuffix(v, "}")
			field, pattern, _ := strings.Cut(v, "=")
			if (pattern != "" && pattern != "*") || strings.Contains(field, ".") {
				return rt, fmt.Errorf("gateway: %s: path variable %q: only single-segment variables of top-level fields are supported", method, seg)
			}
			rt.vars = append(rt.vars, field)
			rt.segments = append(rt.segments, "")
			continue
		}
		rt.segments = append(rt.segments, seg)
	}
	return rt, nil
}

// match finds the route of a REST request: its method and its path as the
// caller escaped it (so a %2F inside a key stays inside its segment).
// values are the path variables, still escaped.
func (t *routeTable) match(verb, escapedPath string) (*route, []string) {
	for i := range t.routes {
		r := &t.routes[i]
		if r.verb != verb {
			continue
		}
		p, ok := strings.CutSuffix(escapedPath, r.suffix)
		if !ok || (r.suffix == "" && strings.Contains(lastSegment(p), ":")) {
			continue
		}
		segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
		if len(segs) != len(r.segments) {
			continue
		}
		vals := make([]string, 0, len(r.vars))
		matched := true
		for j, want := range r.segments {
			switch {
			case want == "":
				vals = append(vals, segs[j])
				matched = matched && segs[j] != ""
			case want != segs[j]:
				matched = false
			}
		}
		if matched {
			return r, vals
		}
	}
	return nil, nil
}

func lastSegment(p string) string { return p[strings.LastIndex(p, "/")+1:] }

// pattern is the route's path template, for messages.
func (r *route) pattern() string {
	var b strings.Builder
	vars := r.vars
	for _, seg := range r.segments {
		b.WriteString("/")
		if seg == "" {
			b.WriteString("{" + vars[0] + "}")
			vars = vars[1:]
			continue
		}
		b.WriteString(seg)
	}
	return b.String() + r.suffix
}
