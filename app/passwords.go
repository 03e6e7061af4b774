package app

import (
	"sync"

	"golang.org/x/crypto/bcrypt"
)

// hashPassword is the stored form of an operator's password: bcrypt at
// cost, 0 being bcrypt.DefaultCost. Tests lower the cost (Deps.PasswordCost):
// under the race detector one hash at the default takes most of a second.
func hashPassword(senha string, cost int) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(senha), bcryptCost(cost))
	return string(h), err
}

// passwordMatches reports whether senha is the password hash was made from.
func passwordMatches(hash, senha string) bool {
	return bcrypt.CompareHashAndPassword([]byte(hash), []byte(senha)) == nil
}

// spendPasswordCheck costs what checking a password of that cost does, for
// a login that names no account: a wrong login takes as long as a wrong
// password and reveals nothing.
func spendPasswordCheck(senha string, cost int) {
	passwordMatches(dummyHash(bcryptCost(cost)), senha)
}

func bcryptCost(cost int) int {
	if cost == 0 {
		return bcrypt.DefaultCost
	}
	return cost
}

// dummyHashes holds one hash per cost in use, made on first need.
var dummyHashes sync.Map // int -> string

func dummyHash(cost int) string {
	if h, ok := dummyHashes.Load(cost); ok {
		return h.(string)
	}
	h, _ := bcrypt.GenerateFromPassword([]byte("geohub-no-such-operator"), cost)
	v, _ := dummyHashes.LoadOrStore(cost, string(h))
	return v.(string)
}
