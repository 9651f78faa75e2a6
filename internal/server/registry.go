package server

import (
	"time"

	"github.com/claimd/claimd/internal/horizon"
)

// RegistryConfig is the provider registry's flags (--providers,
// --horizon-review-age).
type RegistryConfig struct {
	// Providers is a providers file replacing the built-in registry (or
	// adding to it); "" is the built-in one.
	Providers string
	// ReviewAge is how old a provider's reviewed_on may be before its
	// review is overdue.
	ReviewAge time.Duration
}

// Registry loads the registry c names.
func (c *RegistryConfig) Registry() (*horizon.Registry, error) {
	if c.Providers != "" {
		return horizon.LoadFile(c.Providers)
	}
	return horizon.Default()
}
