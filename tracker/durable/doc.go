// Package durable puts bytes on disk for tend so that a crash or a power
// loss cannot take them back, and reads back what others may have put
// there. It guarantees:
//
//   - Replaces are atomic and durable: a reader sees a file's old content
//     or its new, never a mix, and once Replace (or ReplaceAll) returns,
//     the new content and its name survive a power loss.
//   - Every fsync is named (a Flush), so that the power-loss trial's test
//     build (the tendmutants tag) can leave any one of them out and show
//     that it notices.
//   - Reads are bounded and follow no symbolic link: OpenRegular and
//     ReadRegular open only a regular file, never block on a FIFO nor open
//     a device, and read no more than a limit.
//   - The temporary files an interrupted write leaves have names Leftover
//     recognises, so that tend fsck can report them and a watcher can
//     clear them.
//
// It imports nothing of tend's: the request files (spool), the records
// (tracker) and the daemon all write through it.
package durable
