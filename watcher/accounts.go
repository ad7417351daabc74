package watcher

import (
	"fmt"
	"os/user"
	"slices"
	"strconv"

	"github.com/tendhq/tend/spool"
)

// An account is the user a run's process runs as: a root watcher runs
// each request as the owner of its file, with that user's groups and
// home, as at(1) and cron do.
type account struct {
	uid, gid   int
	groups     []uint32 // supplementary, the primary one included
	name, home string
}

// lookupAccount returns the account of uid, from the system's user and
// group databases.
func lookupAccount(uid int) (account, error) {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return account{}, fmt.Errorf("uid %d: %w", uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return account{}, fmt.Errorf("uid %d: primary group %q: %w", uid, u.Gid, err)
	}
	a := account{uid: uid, gid: gid, name: u.Username, home: u.HomeDir}
	ids, err := u.GroupIds()
	if err != nil {
		return account{}, fmt.Errorf("uid %d (%s): its groups: %w", uid, u.Username, err)
	}
	for _, s := range ids {
		if g, err := strconv.Atoi(s); err == nil {
			a.groups = append(a.groups, uint32(g))
		}
	}
	if !slices.Contains(a.groups, uint32(gid)) {
		a.groups = append(a.groups, uint32(gid))
	}
	return a, nil
}

// env is what a run of a's has in its environment to say whose it is;
// nothing for a nil account (a run as the watcher's own user).
func (a *account) env() map[string]string {
	if a == nil {
		return nil
	}
	return map[string]string{"USER": a.name, "LOGNAME": a.name, "HOME": a.home}
}

// lookupUser returns the uid of the user named name (or numbered, as a
// decimal), who must exist.
func lookupUser(name string) (int, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return 0, fmt.Errorf("no user %q", name)
		}
	}
	return strconv.Atoi(u.Uid)
}

// lookupGroup returns the gid of the group named name (or numbered, as a
// decimal), which must exist.
func lookupGroup(name string) (int, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		if g, err = user.LookupGroupId(name); err != nil {
			return 0, fmt.Errorf("no group %q", name)
		}
	}
	return strconv.Atoi(g.Gid)
}

// admit says why request file f may not be taken, or nil if it may. It
// must be owned by the watcher's user, by root, or, where the watcher
// runs as root, by a user config.json allows (users, or a member of
// groups); and it must have no other name than its own (a hard link
// could be a file its owner never meant as a request).
func (w *watcher) admit(f spool.File) error {
	if f.Links > 1 {
		return fmt.Errorf("it has %d links: a request must have no other name than its own", f.Links)
	}
	if f.UID == w.uid || f.UID == 0 || w.allowed(f.UID) {
		return nil
	}
	if w.uid != 0 {
		return fmt.Errorf("owned by uid %d: tend takes requests only from its own user (uid %d) or root", f.UID, w.uid)
	}
	return fmt.Errorf("owned by uid %d, who may not submit requests here: only root and the users and groups in config.json may", f.UID)
}

// allowed reports whether config.json lets uid submit requests, for a
// watcher running as root.
func (w *watcher) allowed(uid int) bool {
	if w.uid != 0 {
		return false
	}
	if slices.Contains(w.settings.Users, uid) {
		return true
	}
	if len(w.settings.Groups) == 0 {
		return false
	}
	a, err := lookupAccount(uid)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(a.groups, func(g uint32) bool { return slices.Contains(w.settings.Groups, int(g)) })
}
