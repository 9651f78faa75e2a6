// The generated Go API of proto/ is a module of its own (as etcd's api/v3),
// so that the client and the server each require it and neither requires
// the other. make generate writes the code beside this file and keeps
// go.mod and go.sum, which are not generated (go mod tidy keeps them).
module github.com/claimd/claimd/gen

go 1.26.8

require (
	google.golang.org/genproto/googleapis/api v0.0.0-20261019180522-ce908d29299b
	google.golang.org/grpc v1.84.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261012220534-4341edf3f941 // indirect
)
