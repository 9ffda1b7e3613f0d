// Drives @ag-ui/client's HttpAgent against a running Mercury, headless, as a UI would.
//   node run.mjs <scenario> <url of /ag-ui> <bearer token>
// Prints one JSON object: what each run saw (event types, interrupts, errors) and the
// agent's messages afterwards. The client's own verifier checks each stream's order.
import { HttpAgent } from '@ag-ui/client';

const [scenario, url, token] = process.argv.slice(2);

function agentFor(threadId) {
  return new HttpAgent({ url, headers: { authorization: `Bearer ${token}` }, threadId });
}

async function run(agent, parameters = {}) {
  const seen = [];
  const events = [];
  let error = null;
  try {
    await agent.runAgent(parameters, {
      onEvent: ({ event }) => {
        seen.push(event.type);
        events.push(event);
      },
    });
  } catch (caught) {
    error = String(caught?.message ?? caught);
  }
  return { seen, events, error, interrupts: agent.pendingInterrupts ?? [] };
}

function messages(agent) {
  return agent.messages.map(({ id, role, content, toolCalls, toolCallId }) => ({
    id,
    role,
    content,
    toolCallId,
    toolCalls: toolCalls?.map((call) => ({ id: call.id, name: call.function.name })),
  }));
}

const scenarios = {
  // One message per demo: the streams the verifier must accept.
  async demos() {
    const out = {};
    for (const demo of ['reasoning', 'tool', 'login', 'error', 'markdown']) {
      const agent = agentFor(`agui-${demo}-${Date.now()}`);
      agent.addMessage({ id: `u-${demo}`, role: 'user', content: `/demo ${demo}` });
      out[demo] = { ...(await run(agent)), messages: messages(agent) };
    }
    return out;
  },

  // A staged confirmation: an interrupt, a run without resume refused by the client, the
  // resume run answering it.
  async confirm() {
    const agent = agentFor(`agui-confirm-${Date.now()}`);
    agent.addMessage({ id: 'u1', role: 'user', content: '/demo confirm' });
    const first = await run(agent);
    const interrupt = first.interrupts[0];
    agent.addMessage({ id: 'u2', role: 'user', content: 'and now?' });
    const refused = await run(agent);
    agent.messages = agent.messages.filter((message) => message.id !== 'u2');
    const choice = interrupt.responseSchema.properties.choice.oneOf[0].const;
    const resumed = await run(agent, {
      resume: [{ interruptId: interrupt.id, status: 'resolved', payload: { choice } }],
    });
    return { first, refused, resumed, messages: messages(agent) };
  },

  // Two labelled choices; the second is picked.
  async choices() {
    const agent = agentFor(`agui-choices-${Date.now()}`);
    agent.addMessage({ id: 'u1', role: 'user', content: '/demo choices' });
    const first = await run(agent);
    const interrupt = first.interrupts[0];
    const choice = interrupt.responseSchema.properties.choice.oneOf[1].const;
    const resumed = await run(agent, {
      resume: [{ interruptId: interrupt.id, status: 'resolved', payload: { choice } }],
    });
    return { first, resumed, messages: messages(agent) };
  },

  // An interrupt cancelled: nothing runs, and the thread goes on.
  async cancel() {
    const agent = agentFor(`agui-cancel-${Date.now()}`);
    agent.addMessage({ id: 'u1', role: 'user', content: '/demo confirm' });
    const first = await run(agent);
    const interrupt = first.interrupts[0];
    const cancelled = await run(agent, {
      resume: [{ interruptId: interrupt.id, status: 'cancelled' }],
    });
    agent.addMessage({ id: 'u2', role: 'user', content: 'hello again' });
    const after = await run(agent);
    return { first, cancelled, after, messages: messages(agent) };
  },
};

const result = await scenarios[scenario]();
process.stdout.write(JSON.stringify(result) + '\n');
