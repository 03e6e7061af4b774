package postgres_test

import (
	"testing"

	"geohub/store/storetest"
)

// The shared state's contracts (storetest.SharedConformance) on
// PostgreSQL; Again is another replica on the same database.
func TestSharedConformance(t *testing.T) {
	storetest.SharedConformance(t, func(t *testing.T) storetest.SharedUnderTest {
		url := freshDatabase(t)
		return storetest.SharedUnderTest{DB: open(t, url),
			Again: func(t *testing.T) storetest.SharedStores { return open(t, url) }}
	})
}
