package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"trainyard/internal/domain"
)

// storeRetryAfter is how long a 503 for a store outage asks clients to wait
// before they try again (the Retry-After header).
const storeRetryAfter = 2 * time.Second

// storeUnavailableMessage is the body of every 503 for a store outage: what
// happened and what to do. The driver's text (hosts, users) stays in the log.
const storeUnavailableMessage = "the store is unavailable: the server cannot reach its database; retry in a few seconds, and if this persists, an operator should check the database"

// isStoreUnavailable reports whether err is an outage of the store
// (domain.ErrUnavailable) rather than the caller's own cancellation.
func isStoreUnavailable(err error) bool {
	return errors.Is(err, domain.ErrUnavailable) && !errors.Is(err, context.Canceled)
}

// writeStoreUnavailable answers 503 store_unavailable with Retry-After and
// logs the cause as a warning: an outage, not a fault of the server.
func (h *handler) writeStoreUnavailable(w http.ResponseWriter, r *http.Request, err error) {
	h.log.Warn("store unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
	setRetryAfter(w, storeRetryAfter)
	writeErr(w, http.StatusServiceUnavailable, "store_unavailable", storeUnavailableMessage, nil)
}

// setRetryAfter sets Retry-After in whole seconds, at least 1.
func setRetryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int((d+time.Second-1)/time.Second))))
}
