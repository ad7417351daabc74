package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK's stdio transport ends the session, and the server, at the
// first line it cannot decode (modelcontextprotocol/go-sdk#1209): "x",
// "null", an "id" that is true, JSON nested too deep, a line too long. An
// agent's one odd line would lose every answer still due. So the lines
// are checked first (filterLines): one the SDK would refuse is answered
// with a JSON-RPC error, as the specification asks, and dropped; the
// rest go on to the SDK, unchanged.

// maxLine bounds a line: the SDK's own bound, less the newline.
const maxLine = mcp.DefaultMaxLineLength - 1

// lockedWriter writes each Write whole, one at a time: the SDK writes a
// message in one Write, and so does filterLines an error, so neither cuts
// into the other.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }

// filterLines returns what the SDK is to read of in: its lines that are
// JSON-RPC messages. Every other line is answered on out with an error.
func filterLines(in io.Reader, out io.Writer) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		r := bufio.NewReaderSize(in, 64<<10)
		for {
			line, tooLong, err := readLine(r)
			switch {
			case tooLong:
				answerBad(out, nil, jsonrpc.CodeInvalidRequest, "the line is longer than 16 MiB")
			case len(bytes.TrimSpace(line)) == 0:
			default:
				if code, msg := check(line); code != 0 {
					answerBad(out, line, code, msg)
				} else if _, werr := pw.Write(append(line, '\n')); werr != nil {
					return // the SDK closed its end
				}
			}
			if err != nil {
				pw.CloseWithError(err) // io.EOF: the end of the input
				return
			}
		}
	}()
	return pr
}

// readLine reads a line of r, without its newline; past maxLine it reads
// on to the newline and keeps nothing (tooLong).
func readLine(r *bufio.Reader) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			line = append(line, chunk...)
			if len(line) > maxLine+1 {
				line, tooLong = nil, true
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), tooLong, err
	}
}

// check returns the JSON-RPC error code and message for a line the SDK
// would refuse, or 0. A batch (an array) is refused too: MCP has none
// since 2025-06-18, and the SDK's own refusal ends the session.
func check(line []byte) (int, string) {
	if !json.Valid(line) {
		return jsonrpc.CodeParseError, "parse error: the line is not JSON"
	}
	if bytes.HasPrefix(bytes.TrimSpace(line), []byte("[")) {
		return jsonrpc.CodeInvalidRequest, "batches are not supported: send one message a line"
	}
	if _, err := jsonrpc.DecodeMessage(line); err != nil {
		return jsonrpc.CodeInvalidRequest, "invalid request: " + err.Error()
	}
	return 0, ""
}

// answerBad writes the error answer to line: to its id, if it has one
// that is a string or a number, else to null.
func answerBad(out io.Writer, line []byte, code int, msg string) {
	id := json.RawMessage("null")
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(line, &m) == nil && len(m.ID) > 0 && (m.ID[0] == '"' || m.ID[0] == '-' || m.ID[0] >= '0' && m.ID[0] <= '9') {
		id = m.ID
	}
	type wireError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   wireError       `json:"error"`
	}{"2.0", id, wireError{code, msg}})
	out.Write(append(b, '\n'))
}
