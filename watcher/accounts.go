package watcher

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/watcher/config"
	"golang.org/x/sys/unix"
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

// baseEnv is the environment a run of a's starts from, before its
// request's: the watcher's own for a run as the watcher's user (nil a);
// for another user's, nothing of the watcher's (root's exported tokens,
// SUDO_*), as at(1) and cron give a job only its submitter's, but a PATH.
func (a *account) baseEnv() []string {
	if a == nil {
		return os.Environ()
	}
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
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

// admit says why request file f, read from the spool, may not be taken,
// or nil if it may (see admitOwner). A file of root's in a spool others
// may write must carry the mark root's clients put on their requests
// (spool.Mark): anyone may move a file into such a spool, and root leaves
// files of its own in other users' directories (a build run as root in a
// checkout, a list cache), which must not become root's requests.
func (w *watcher) admit(f spool.File) error {
	if err := w.admitOwner(f); err != nil {
		return err
	}
	if f.UID == 0 && !f.Marked && w.spoolShared() {
		return errors.New("owned by root, but in a spool others may write and without the mark tend's clients put on root's requests: anyone could have moved it here (as root, submit with tend, or mark it: setfattr -n trusted.tend -v request FILE)")
	}
	return nil
}

// spoolShared reports whether others than the watcher's user may write
// the spool (a shared root's, sticky).
func (w *watcher) spoolShared() bool {
	var st unix.Stat_t
	return unix.Stat(w.spool.Spool(), &st) != nil || st.Mode&0o022 != 0
}

// admitOwner says why a request file of owner f.UID, with f.Links links,
// may not be taken, or nil if it may. It must be owned by the watcher's
// user, by root, or, where the watcher runs as root, by a user config.json
// allows (users, or a member of groups); and it must have no other name
// than its own (a hard link could be a file its owner never meant as a
// request).
func (w *watcher) admitOwner(f spool.File) error {
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

// systemNames are the system's name services (NSS: files, LDAP, ...),
// through which the watcher resolves config.json's users and groups.
func systemNames() config.Names {
	return config.Names{User: lookupUser, Group: lookupGroup}
}
