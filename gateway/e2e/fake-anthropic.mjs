// A stand-in for the Anthropic Messages API (streaming), for running the
// console test against a real deskgrid without a real model: the first turn
// asks the computer tool for a screenshot, the turn after a tool result
// answers with FINAL_TEXT.
//
//   node fake-anthropic.mjs [port]      prints "listening <url>" and serves until killed
import { createServer } from 'node:http';

export const FINAL_TEXT = 'The desktop is ready.';

function send(res, event, data) {
  res.write(`event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`);
}

function turn(res, n, finalTurn) {
  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
  send(res, 'message_start', { message: { id: `msg_${n}`, type: 'message', role: 'assistant', model: 'fake', content: [],
    stop_reason: null, stop_sequence: null, usage: { input_tokens: 100, output_tokens: 1 } } });
  if (finalTurn) {
    send(res, 'content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
    for (const part of [FINAL_TEXT.slice(0, 8), FINAL_TEXT.slice(8)]) {
      send(res, 'content_block_delta', { index: 0, delta: { type: 'text_delta', text: part } });
    }
  } else {
    send(res, 'content_block_start', { index: 0, content_block: { type: 'tool_use', id: `toolu_${n}`, name: 'computer', input: {} } });
    send(res, 'content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: '{"action":"screenshot"}' } });
  }
  send(res, 'content_block_stop', { index: 0 });
  send(res, 'message_delta', { delta: { stop_reason: finalTurn ? 'end_turn' : 'tool_use', stop_sequence: null }, usage: { output_tokens: 20 } });
  send(res, 'message_stop', {});
  res.end();
}

// startFakeAnthropic serves on 127.0.0.1 and resolves to { url, close }.
export function startFakeAnthropic(port = 0) {
  let n = 0;
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      if (req.method !== 'POST' || !req.url.startsWith('/v1/messages')) {
        res.writeHead(404, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ type: 'error', error: { type: 'not_found_error', message: `no route ${req.method} ${req.url}` } }));
        return;
      }
      let finalTurn = false;
      try {
        const msgs = JSON.parse(body).messages || [];
        const last = msgs[msgs.length - 1] || {};
        finalTurn = Array.isArray(last.content) && last.content.some((b) => b.type === 'tool_result');
      } catch { /* a first turn */ }
      turn(res, ++n, finalTurn);
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      resolve({ url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) });
    });
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { url } = await startFakeAnthropic(Number(process.argv[2] || 0));
  console.log('listening ' + url);
}
