//go:build !unix

package main

import "os"

// tempOpenFlags: no O_NOFOLLOW here; openBackupTemp checks for a link
// with Lstat first.
const tempOpenFlags = 0

// lockTemp does nothing where flock is missing: two backups to the same
// file at once are not kept apart there.
func lockTemp(*os.File) error { return nil }
