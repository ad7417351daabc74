module github.com/tendhq/tend

go 1.26.0

require (
	github.com/alecthomas/kong v1.17.0
	github.com/fsnotify/fsnotify v1.10.1
	github.com/gofrs/flock v0.13.1
	github.com/natefinch/atomic v1.0.1
	github.com/rogpeppe/go-internal v1.16.0
	golang.org/x/sys v0.49.0
)

require golang.org/x/tools v0.26.0 // indirect
