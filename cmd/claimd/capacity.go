package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/claimd/claimd/internal/capacity"
	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/server"
)

// capacityConfig is what claimd capacity reads.
type capacityConfig struct {
	server.RegistryConfig
	Rate     string
	Provider string
	In       capacity.Input
}

func bindCapacity(fs *flag.FlagSet, c *capacityConfig) {
	bindRegistry(fs, &c.RegistryConfig)
	fs.StringVar(&c.Rate, "rate", "", "new events per second, e.g. 2000/s (also /m, /h); required")
	fs.StringVar(&c.Provider, "provider", "stripe", "provider or group whose window (ttl) the records keep")
	fs.IntVar(&c.In.ResultBytes, "result-bytes", 256, "bytes of result stored per settled event")
	fs.Float64Var(&c.In.Duplicates, "duplicates", 0.1, "extra deliveries per event (provider retries), e.g. 0.1")
	fs.DurationVar(&c.In.Grace, "grace", janitor.DefaultGrace, "claims kept past their window (as claimd serve --grace)")
	fs.DurationVar(&c.In.Retention, "retention", janitor.DefaultRetention, "audit rows kept (as claimd serve --retention)")
}

// runCapacity prints the steady-state size of a deployment for an event
// rate, from sizes measured on real servers (internal/capacity).
func runCapacity(_ context.Context, args []string, stdout, _ io.Writer) error {
	var c capacityConfig
	fs := newFlagSet("capacity")
	bindCapacity(fs, &c)
	if err := parse(fs, args); err != nil {
		return err
	}
	perSecond, err := parseRate(c.Rate)
	if err != nil {
		return err
	}
	in := c.In
	switch {
	case in.ResultBytes < 0:
		return fmt.Errorf("%w: --result-bytes %d is negative", errUsage, in.ResultBytes)
	case in.Duplicates < 0:
		return fmt.Errorf("%w: --duplicates %v is negative", errUsage, in.Duplicates)
	case in.Grace < 0 || in.Retention <= 0:
		return fmt.Errorf("%w: --grace must not be negative and --retention must be positive", errUsage)
	}
	reg, err := c.Registry()
	if err != nil {
		return err
	}
	p, ok := reg.Lookup(c.Provider)
	if !ok {
		return fmt.Errorf("%w: --provider %.64q is not in the registry (claimd providers lists it)", errUsage, c.Provider)
	}
	sizes, err := capacity.Measured()
	if err != nil {
		return err
	}
	in.Rate, in.TTL = perSecond, p.TTL
	return sizes.Estimate(in).Write(stdout, sizes)
}

// parseRate reads "2000/s", "120000/m", "7.2e6/h" or a bare number (per
// second) as events per second.
func parseRate(s string) (float64, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: --rate is required, e.g. --rate 2000/s", errUsage)
	}
	num, unit, _ := strings.Cut(s, "/")
	per := time.Second
	switch unit {
	case "", "s":
	case "m", "min":
		per = time.Minute
	case "h":
		per = time.Hour
	default:
		return 0, fmt.Errorf("%w: --rate %.32q: unit %.8q is not s, m or h", errUsage, s, unit)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%w: --rate %.32q: want a positive number of events per s, m or h", errUsage, s)
	}
	return v / per.Seconds(), nil
}
