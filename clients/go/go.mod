module github.com/claimd/claimd/clients/go

go 1.26.8

require (
	github.com/claimd/claimd v0.0.0-00010101000000-000000000000
	github.com/google/go-cmp v0.7.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/grpc v1.84.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20261019180522-ce908d29299b // indirect
)

// The client imports the generated API (gen/), which lives in the server's
// module. A release requires the server's module at its version; in this
// repository, the client builds against the code beside it.
replace github.com/claimd/claimd => ../..
