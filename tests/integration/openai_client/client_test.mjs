// The official openai npm client against a running `ferry serve` of the scripted checkpoint
// (tests/data/glm-dsa-scripted: after an open <think> it writes "Sure thing.</think>" and then
// a weather call for Oslo). Usage: node client_test.mjs BASE_URL API_KEY
import assert from "node:assert/strict";
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const model = "glm-dsa-scripted";
const tools = [{
  type: "function",
  function: {
    name: "weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];
const messages = [{ role: "user", content: "Weather in Oslo?" }];
let passed = 0;
async function check(name, fn) {
  await fn();
  passed += 1;
  console.log(`ok - ${name}`);
}

await check("models lists the served model", async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [model]);
});

let call;
await check("chat: reasoning and a tool call", async () => {
  const r = await client.chat.completions.create({ model, messages, tools, max_tokens: 64 });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  assert.equal(m.reasoning_content, "Sure thing.");
  assert.equal(m.content, null);
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].function.name, "weather");
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: "Oslo" });
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
  call = m;
});

await check("chat streamed: reasoning deltas, the call, the finish reason and usage", async () => {
  const stream = await client.chat.completions.create({
    model, messages, tools, max_tokens: 64, stream: true, stream_options: { include_usage: true },
  });
  let reasoning = "";
  const calls = [];
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.delta.reasoning_content) reasoning += choice.delta.reasoning_content;
    for (const c of choice.delta.tool_calls ?? []) calls.push(c);
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  assert.equal(reasoning, "Sure thing.");
  assert.equal(calls.length, 1);
  assert.equal(calls[0].function.name, "weather");
  assert.deepEqual(JSON.parse(calls[0].function.arguments), { city: "Oslo" });
  assert.equal(finish, "tool_calls");
  assert.ok(usage && usage.completion_tokens > 0);
});

await check("chat: the tool's result goes back and the model answers", async () => {
  const history = [...messages, call, { role: "tool", tool_call_id: call.tool_calls[0].id, content: "Sunny, 21 C" }];
  const r = await client.chat.completions.create({ model, messages: history, tools, max_tokens: 64 });
  assert.equal(r.choices[0].message.reasoning_content, "Sure thing.");
  assert.equal(r.choices[0].message.tool_calls.length, 1);
});

await check("completions: a stop string ends the text before it", async () => {
  const r = await client.completions.create({
    model, prompt: "<|user|>hi<|assistant|><think>", max_tokens: 32, stop: ["thing"], temperature: 0,
  });
  assert.equal(r.choices[0].text, "Sure ");
  assert.equal(r.choices[0].finish_reason, "stop");
});

await check("an invalid request is a 400 APIError with the server's message", async () => {
  await assert.rejects(client.chat.completions.create({ model, messages: [] }), (e) => {
    assert.ok(e instanceof OpenAI.APIError);
    assert.equal(e.status, 400);
    assert.match(e.message, /messages must be a non-empty array/);
    return true;
  });
});

await check("a wrong key is a 401 AuthenticationError", async () => {
  const other = new OpenAI({ baseURL, apiKey: "sk-wrong", maxRetries: 0 });
  await assert.rejects(other.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
});

console.log(`openai client: ${passed} passed`);
