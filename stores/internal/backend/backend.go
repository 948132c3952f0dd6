// Package backend holds what the store backends (memory, sqlite, postgres)
// share and is not part of the stores API: the answers of a batch claim,
// reading embedded migrations, encoding and checking outbox properties, and
// purging in batches. It imports stores for the types; stores never imports
// it.
package backend

import "github.com/acemq/acemq-flow/stores"

// Stale builds the refusal for a presented token given what the store holds
// for the key now: current is 0 when no row exists.
func Stale(key string, presented, current stores.Token, confirmed bool) *stores.StaleClaimError {
	return &stores.StaleClaimError{Key: key, Token: presented, Current: current, Confirmed: confirmed}
}

// Dedupe returns the indexes of the first request for each key and, for every
// request, the index of the first one with its key.
func Dedupe(reqs []stores.ClaimRequest) (firsts []int, firstOf []int) {
	seen := make(map[string]int, len(reqs))
	firstOf = make([]int, len(reqs))
	for i, r := range reqs {
		if j, ok := seen[r.Key]; ok {
			firstOf[i] = j
			continue
		}
		seen[r.Key] = i
		firstOf[i] = i
		firsts = append(firsts, i)
	}
	return firsts, firstOf
}

// Spread copies the answers of the first request per key to its duplicates.
// A later duplicate of a key the batch claimed is IN_PROGRESS: the claim
// belongs to the first, and exactly one delivery may run the handler.
func Spread(out []stores.Claim, firstOf []int) {
	for i, j := range firstOf {
		if i == j {
			continue
		}
		c := out[j]
		if c.State == stores.Claimed {
			c.State = stores.InProgress
			c.Token = 0
		}
		out[i] = c
	}
}
