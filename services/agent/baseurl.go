package agent

import (
	"fmt"
	"net/url"
	"strings"
)

// DefaultProviderBaseURLs are the base URLs a run may name when the
// operator lists none: the providers' own API hosts.
var DefaultProviderBaseURLs = []string{
	"https://api.anthropic.com",
	"https://api.openai.com",
	"https://generativelanguage.googleapis.com",
}

// ProviderBaseURLsFlag names the setting in messages, so a refused caller
// knows what its operator would change.
const ProviderBaseURLsFlag = "-provider-base-urls (DESKGRID_PROVIDER_BASE_URLS)"

// baseURLRule is one allowed base URL: a scheme, a host, a port ("*" for
// any) and a path prefix.
type baseURLRule struct {
	scheme, host, port, path string
}

// parseBaseURLRules reads the operator's list. An entry is
// scheme://host[:port][/path]; a port of "*" allows any port of the host.
func parseBaseURLRules(list []string) ([]baseURLRule, error) {
	var out []baseURLRule
	for _, raw := range list {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		anyPort := false
		if i := strings.Index(raw, ":*"); i >= 0 && strings.Contains(raw[:i], "://") {
			anyPort = true
			raw = raw[:i] + raw[i+2:]
		}
		u, err := parseBaseURL(raw)
		if err != nil {
			return nil, fmt.Errorf("provider base URL %q: %w", raw, err)
		}
		r := baseURLRule(u)
		if anyPort {
			r.port = "*"
		}
		out = append(out, r)
	}
	return out, nil
}

type baseURL struct{ scheme, host, port, path string }

// parseBaseURL takes an http(s) URL apart, with the scheme's default port
// made explicit and the path without its trailing slash.
func parseBaseURL(raw string) (baseURL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return baseURL{}, err
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return baseURL{}, fmt.Errorf("scheme must be http or https")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return baseURL{}, fmt.Errorf("only scheme, host, port and path are allowed")
	}
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return baseURL{}, fmt.Errorf("host is required")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return baseURL{scheme: scheme, host: host, port: port, path: strings.TrimSuffix(u.EscapedPath(), "/")}, nil
}

// allows reports whether a run's base URL is beneath one of the rules.
func (r baseURLRule) allows(u baseURL) bool {
	if u.scheme != r.scheme || u.host != r.host || (r.port != "*" && u.port != r.port) {
		return false
	}
	return r.path == "" || u.path == r.path || strings.HasPrefix(u.path, r.path+"/")
}

// checkBaseURL refuses a run's base URL that no rule allows. The operator's
// own per-provider base URLs are always allowed.
func (s *Service) checkBaseURL(provider, raw string) error {
	if raw == "" || raw == s.cfg.BaseURLs[provider] {
		return nil
	}
	u, err := parseBaseURL(raw)
	if err != nil {
		return fmt.Errorf("base_url %q: %w; runs may name only the provider base URLs the operator lists with %s", raw, err, ProviderBaseURLsFlag)
	}
	for _, r := range s.baseURLs {
		if r.allows(u) {
			return nil
		}
	}
	return fmt.Errorf("base_url %q is not allowed: runs may name only the provider base URLs the operator lists with %s", raw, ProviderBaseURLsFlag)
}
