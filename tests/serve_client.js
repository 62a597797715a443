// serve_client.js: drives `ljperf serve` with the official OpenAI Node.js client (and fetch for
// what the client cannot send: broken JSON, bad UTF-8, missing keys). Run by test_serve.sh:
//   node serve_client.js <openai package dir> <base url> <api key> <model> <expected.json>
// expected.json: {"prompt": ..., "greedy": the text `ljperf generate` prints after the prompt}.
// Every check that fails throws; the exit status is 0 only when all passed.
'use strict';
const assert = require('assert');
const fs = require('fs');
const [, , pkg, base, key, model, expectedPath] = process.argv;
const mod = require(pkg);
const OpenAI = mod.OpenAI || mod.default || mod;
const client = new OpenAI({ baseURL: base + '/v1', apiKey: key, maxRetries: 0, timeout: 120000 });
const expected = JSON.parse(fs.readFileSync(expectedPath, 'utf8'));

async function raw(path, body, headers = {}) {
  const r = await fetch(base + path, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + key, ...headers },
    body,
  });
  return { status: r.status, text: await r.text(), headers: r.headers };
}

async function metrics() {
  const r = await raw('/metrics');
  assert.strictEqual(r.status, 200);
  const get = (name) => {
    const m = r.text.match(new RegExp('^' + name.replace(/[:]/g, '\\:') + '\\{[^}]*\\} ([0-9.e+-]+)$', 'm'));
    assert.ok(m, name + ' missing from /metrics');
    return Number(m[1]);
  };
  return { running: get('vllm:num_requests_running'), waiting: get('vllm:num_requests_waiting'),
           kv: get('vllm:kv_cache_usage_perc'), hits: get('vllm:prefix_cache_hits_total'),
           queries: get('vllm:prefix_cache_queries_total'), text: r.text };
}

// The engine publishes its counts after each step: wait (bounded by the test's timeout) for idle.
async function idle() {
  for (;;) {
    const m = await metrics();
    if (m.running === 0 && m.waiting === 0 && m.kv === 0) return m;
    await new Promise((r) => setTimeout(r, 20));
  }
}

const checks = [];
const check = (name, fn) => checks.push([name, fn]);

check('models', async () => {
  const list = await client.models.list();
  assert.deepStrictEqual(list.data.map((m) => m.id), [model]);
});

check('greedy completion equals ljperf generate', async () => {
  const r = await client.completions.create({ model, prompt: expected.prompt, max_tokens: expected.tokens,
                                              temperature: 0, ignore_eos: true });
  assert.strictEqual(r.choices[0].text, expected.greedy);
  assert.strictEqual(r.choices[0].finish_reason, 'length');
  assert.strictEqual(r.usage.completion_tokens, expected.tokens);
  assert.ok(r.id.startsWith('cmpl-'));
});

check('streamed completion equals the blocking one, usage last', async () => {
  const stream = await client.completions.create({ model, prompt: expected.prompt, max_tokens: expected.tokens,
                                                   temperature: 0, ignore_eos: true, stream: true,
                                                   stream_options: { include_usage: true } });
  let text = '', usage = null, finish = null, afterUsage = 0;
  for await (const chunk of stream) {
    if (usage) afterUsage++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.strictEqual(text, expected.greedy);
  assert.strictEqual(finish, 'length');
  assert.ok(usage && usage.completion_tokens === expected.tokens, JSON.stringify(usage));
  assert.strictEqual(afterUsage, 0);
});

check('chat: blocking and streamed agree; the template renders', async () => {
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say something.' }];
  const a = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0 });
  assert.strictEqual(a.object, 'chat.completion');
  assert.strictEqual(a.choices[0].message.role, 'assistant');
  const s = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0, stream: true,
                                                   stream_options: { include_usage: true } });
  let text = '', role = null, usage = null;
  for await (const chunk of s) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) text += c.delta.content;
    }
  }
  assert.strictEqual(role, 'assistant');
  assert.strictEqual(text, a.choices[0].message.content);
  assert.strictEqual(usage.prompt_tokens, a.usage.prompt_tokens);
  assert.strictEqual(usage.completion_tokens, a.usage.completion_tokens);
  // the second time, the prompt's full blocks come from the prefix cache
  assert.strictEqual(usage.prompt_tokens_details.cached_tokens, Math.floor((a.usage.prompt_tokens - 1) / 16) * 16);
  const tok = JSON.parse((await raw('/tokenize', JSON.stringify({ messages }))).text);
  assert.strictEqual(tok.count, a.usage.prompt_tokens);
});

check('n and seed', async () => {
  const args = { model, prompt: expected.prompt, max_tokens: 8, temperature: 1.0, top_p: 0.95, top_k: 50, seed: 7, n: 3 };
  const a = await client.completions.create(args), b = await client.completions.create(args);
  assert.strictEqual(a.choices.length, 3);
  assert.deepStrictEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.deepStrictEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  const texts = new Set(a.choices.map((c) => c.text));
  assert.ok(texts.size > 1, 'three seeded choices are all equal: ' + JSON.stringify([...texts]));
});

check('stop strings', async () => {
  // a stop string from the middle of the greedy answer: the answer ends right before it
  const g = expected.greedy;
  const cut = g.indexOf(' ', 3) > 0 ? g.indexOf(' ', 3) : 3;
  const stop = g.slice(cut, cut + 3);
  const r = await client.completions.create({ model, prompt: expected.prompt, max_tokens: expected.tokens,
                                              temperature: 0, ignore_eos: true, stop: [stop] });
  assert.strictEqual(r.choices[0].text, g.slice(0, g.indexOf(stop)));
  assert.strictEqual(r.choices[0].finish_reason, 'stop');
  const inc = await client.completions.create({ model, prompt: expected.prompt, max_tokens: expected.tokens,
                                                temperature: 0, ignore_eos: true, stop, include_stop_str_in_output: true });
  assert.strictEqual(inc.choices[0].text, g.slice(0, g.indexOf(stop) + stop.length));
});

check('logprobs', async () => {
  const r = await client.completions.create({ model, prompt: expected.prompt, max_tokens: 5, temperature: 0,
                                              ignore_eos: true, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  assert.strictEqual(lp.tokens.length, 5);
  assert.strictEqual(lp.tokens.join(''), r.choices[0].text);
  for (let i = 0; i < 5; i++) {
    const top = Object.entries(lp.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 3);
    const best = Math.max(...top.map(([, v]) => v));
    assert.ok(Math.abs(best - lp.token_logprobs[i]) < 1e-6, 'greedy token is not the top one');
    assert.ok(lp.token_logprobs[i] <= 0);
  }
  const c = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3,
                                                   temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = c.choices[0].logprobs.content;
  assert.strictEqual(content.length, c.usage.completion_tokens);
  assert.strictEqual(content[0].top_logprobs.length, 2);
  assert.ok(Array.isArray(content[0].bytes));
});

check('tokenize and detokenize', async () => {
  const t = JSON.parse((await raw('/tokenize', JSON.stringify({ prompt: 'In the beginning' }))).text);
  assert.ok(t.count >= 3 && t.tokens.length === t.count);
  const d = JSON.parse((await raw('/detokenize', JSON.stringify({ tokens: t.tokens.slice(1) }))).text);
  assert.strictEqual(d.prompt, 'In the beginning');
});

check('bad requests get OpenAI errors, never a crash', async () => {
  const bad = [
    ['/v1/completions', '{"prompt": "x", ', 400, null],
    ['/v1/completions', '[1, 2]', 400, null],
    ['/v1/completions', JSON.stringify({ prompt: 'x', max_tokens: 0 }), 400, 'max_tokens'],
    ['/v1/completions', JSON.stringify({ prompt: 'x', max_tokens: 1e12 }), 400, 'max_tokens'],
    ['/v1/completions', JSON.stringify({ prompt: 'x', max_tokens: 'ten' }), 400, 'max_tokens'],
    ['/v1/completions', JSON.stringify({ prompt: 'x', temperature: -1 }), 400, 'temperature'],
    ['/v1/completions', JSON.stringify({ prompt: 'x', frobnicate: 1 }), 400, 'frobnicate'],
    ['/v1/completions', JSON.stringify({ prompt: 'x', n: 0 }), 400, 'n'],
    ['/v1/completions', JSON.stringify({ prompt: 'word '.repeat(400) }), 400, 'prompt'],
    ['/v1/completions', JSON.stringify({ prompt: 'x', model: 'other' }), 404, 'model'],
    ['/v1/completions', JSON.stringify({ prompt: [1, -5] }), 400, 'prompt'],
    ['/v1/completions', JSON.stringify({}), 400, 'prompt'],
    ['/v1/chat/completions', JSON.stringify({ messages: [] }), 400, 'messages'],
    ['/v1/chat/completions', JSON.stringify({ messages: [{ role: 'wizard', content: 'x' }] }), 400, 'messages'],
    ['/v1/chat/completions', JSON.stringify({ messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function' }] }), 400, 'tools'],
    ['/v1/nothing', '{}', 404, null],
  ];
  for (const [path, body, status, param] of bad) {
    const r = await raw(path, body);
    assert.strictEqual(r.status, status, path + ' ' + body.slice(0, 60) + ': ' + r.text);
    const e = JSON.parse(r.text).error;
    assert.ok(e && typeof e.message === 'string' && e.type && 'param' in e && e.code === status, r.text);
    if (param) assert.strictEqual(e.param, param, r.text);
  }
  // invalid UTF-8 in the body
  const r = await fetch(base + '/v1/completions', { method: 'POST', headers: { Authorization: 'Bearer ' + key },
    body: Buffer.concat([Buffer.from('{"prompt": "'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]) });
  assert.strictEqual(r.status, 400);
  // no key, wrong key
  assert.strictEqual((await raw('/v1/models', undefined, { Authorization: '' })).status, 401);
  assert.strictEqual((await raw('/v1/models', undefined, { Authorization: 'Bearer nope' })).status, 401);
  // the OpenAI client surfaces the error as an exception with the status
  await assert.rejects(client.completions.create({ model, prompt: 'x', max_tokens: -3 }), (e) => e.status === 400);
});

check('fuzzed bodies: each answered 200, 400 or 404, the server alive', async () => {
  let seed = 99;
  const rand = (n) => ((seed = (seed * 1103515245 + 12345) % 2147483648) % n);
  const values = [0, -1, 1.5, 1e300, -1e300, '', 'x', '\u0000', '\ud800', true, false, null, [], {}, [1, 'a'],
                  { a: 1 }, 'x'.repeat(3000), 2 ** 31, -(2 ** 53), 'tiny'];
  const fields = ['prompt', 'messages', 'max_tokens', 'temperature', 'top_p', 'top_k', 'n', 'stop', 'seed', 'logprobs',
                  'stream', 'stream_options', 'min_p', 'stop_token_ids', 'min_tokens', 'model', 'presence_penalty',
                  'chat_template_kwargs', 'cache_salt', 'top_logprobs', 'nonsense'];
  const statuses = {};
  for (let i = 0; i < 150; i++) {
    const body = { prompt: 'In the', max_tokens: 2 };
    for (let k = rand(4); k >= 0; k--) body[fields[rand(fields.length)]] = values[rand(values.length)];
    let text = JSON.stringify(body);
    if (rand(4) === 0) text = text.slice(0, rand(text.length)); /* cut short */
    const path = rand(2) ? '/v1/completions' : '/v1/chat/completions';
    const r = await raw(path, text);
    assert.ok([200, 400, 404].includes(r.status), `${path} ${text.slice(0, 200)}: ${r.status} ${r.text.slice(0, 200)}`);
    if (r.status !== 200) assert.ok(JSON.parse(r.text).error.message, r.text);
    statuses[r.status] = (statuses[r.status] || 0) + 1;
  }
  assert.ok(statuses[400] > 0);
  assert.strictEqual((await raw('/health')).status, 200);
});

check('a client that disconnects frees its sequence', async () => {
  const ctl = new AbortController();
  const s = await client.completions.create({ model, prompt: expected.prompt, max_tokens: 120, temperature: 0,
                                              ignore_eos: true, stream: true }, { signal: ctl.signal });
  let got = 0;
  try {
    for await (const chunk of s) {
      got += chunk.choices.length;
      if (got >= 2) ctl.abort();
    }
  } catch (e) {
    assert.ok(ctl.signal.aborted, String(e));
  }
  const m = await idle();
  assert.strictEqual(m.kv, 0);
  assert.match(m.text, /vllm:request_success_total\{finished_reason="abort",model_name="[^"]*"\} [1-9]/);
});

check('load: concurrent requests, some cancelled, none mixed up', async () => {
  const prompts = [];
  for (let i = 0; i < 12; i++) prompts.push(`${expected.prompt} ${'and '.repeat(i % 5)}${i}`);
  const MAX = 12;
  const alone = [];
  for (const p of prompts) {
    const r = await client.completions.create({ model, prompt: p, max_tokens: MAX, temperature: 0, ignore_eos: true,
                                                logprobs: 0 });
    alone.push(r.choices[0].logprobs.tokens);
  }
  let seed = 12345;
  const rand = (n) => ((seed = (seed * 1103515245 + 12345) % 2147483648) % n);
  const N = Number(process.env.LJ_SERVE_LOAD_REQUESTS || 2000), CONC = 24;
  let next = 0, done = 0, cancelled = 0;
  async function worker() {
    while (next < N) {
      const i = next++, k = rand(prompts.length), max = 1 + rand(MAX), cancel = rand(5) === 0, stream = rand(2) === 0;
      const want = alone[k].slice(0, max);
      if (!stream && !cancel) {
        const r = await client.completions.create({ model, prompt: prompts[k], max_tokens: max, temperature: 0,
                                                    ignore_eos: true, logprobs: 0 });
        assert.deepStrictEqual(r.choices[0].logprobs.tokens, want, 'request ' + i);
      } else {
        const ctl = new AbortController();
        const s = await client.completions.create({ model, prompt: prompts[k], max_tokens: max, temperature: 0,
                                                    ignore_eos: true, logprobs: 0, stream: true },
                                                  { signal: ctl.signal });
        const toks = [];
        try {
          for await (const chunk of s) {
            for (const c of chunk.choices) if (c.logprobs) toks.push(...c.logprobs.tokens);
            if (cancel && toks.length > 0) ctl.abort(); /* cancelled midway */
          }
        } catch (e) {
          if (!ctl.signal.aborted) throw e;
        }
        if (ctl.signal.aborted) cancelled++;
        else assert.deepStrictEqual(toks, want, 'streamed request ' + i);
      }
      done++;
    }
  }
  await Promise.all(Array.from({ length: CONC }, worker));
  assert.strictEqual(done, N);
  const m = await idle();
  assert.strictEqual(m.kv, 0);
  assert.ok(m.hits > 0, 'no prefix-cache hits');
  console.log(`load: ${N} requests (${CONC} at a time), ${cancelled} cancelled, every answer equal to its lone run`);
});

(async () => {
  const only = process.env.LJ_SERVE_ONLY;
  let failed = 0;
  for (const [name, fn] of checks) {
    if (only && !name.includes(only)) continue;
    const t0 = Date.now();
    try {
      await fn();
      console.log(`ok: ${name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL: ${name}: ${e && e.stack ? e.stack : e}`);
    }
  }
  process.exit(failed ? 1 : 0);
})();
