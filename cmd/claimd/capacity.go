package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/claimd/claimd/internal/capacity"
	"github.com/claimd/claimd/internal/janitor"
)

// runCapacity prints the steady-state size of a deployment for an event
// rate, from sizes measured on real servers (internal/capacity).
func runCapacity(args []string, stdout, stderr io.Writer) error {
	var (
		c        commonConfig
		r        retentionConfig
		rate     string
		provider string
		in       capacity.Input
	)
	fs := newFlagSet("capacity", stderr)
	bindCommon(fs, &c)
	fs.StringVar(&rate, "rate", "", "new events per second, e.g. 2000/s (also /m, /h); required")
	fs.StringVar(&provider, "provider", "stripe", "provider or group whose window (ttl) the records keep")
	fs.IntVar(&in.ResultBytes, "result-bytes", 256, "bytes of result stored per settled event")
	fs.Float64Var(&in.Duplicates, "duplicates", 0.1, "extra deliveries per event (provider retries), e.g. 0.1")
	fs.DurationVar(&r.Grace, "grace", janitor.DefaultGrace, "claims kept past their window (as claimd serve --grace)")
	fs.DurationVar(&r.Retention, "retention", janitor.DefaultRetention, "audit rows kept (as claimd serve --retention)")
	if err := parse(fs, args); err != nil {
		return err
	}
	perSecond, err := parseRate(rate)
	if err != nil {
		return err
	}
	switch {
	case in.ResultBytes < 0:
		return fmt.Errorf("%w: --result-bytes %d is negative", errUsage, in.ResultBytes)
	case in.Duplicates < 0:
		return fmt.Errorf("%w: --duplicates %v is negative", errUsage, in.Duplicates)
	case r.Grace < 0 || r.Retention <= 0:
		return fmt.Errorf("%w: --grace must not be negative and --retention must be positive", errUsage)
	}
	reg, err := c.registry()
	if err != nil {
		return err
	}
	p, ok := reg.Lookup(provider)
	if !ok {
		return fmt.Errorf("%w: --provider %.64q is not in the registry (claimd providers lists it)", errUsage, provider)
	}
	sizes, err := capacity.Measured()
	if err != nil {
		return err
	}
	in.Rate, in.TTL, in.Grace, in.Retention = perSecond, p.TTL, r.Grace, r.Retention
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
