// Drives the official AG-UI client (@ag-ui/client's HttpAgent) through a list of steps against
// POST /agui, for tests/api/test_agui_client.py. It reads one JSON job from stdin:
//   {url, threadId, headers?, stepTimeoutMs?, steps: [step, ...]}
// where a step is {message: text} (a user message, then a run) or {resume: [entries], runId?,
// loseResponse?} (a run that resumes interrupts). With loseResponse the first attempt's response
// is read to its end and then lost (a network TypeError), and the step is retried with the same
// runId and resume. It writes one JSON result to stdout: what the client saw at every step, and
// everything the client printed to the console.
import { randomUUID } from "node:crypto";
import { format } from "node:util";

// Before the client is loaded, so that nothing it prints escapes (stdout carries the result).
const printed = [];
let where = { step: null, attempt: null };
for (const level of ["error", "warn", "log", "info", "debug"]) {
  console[level] = (...args) => printed.push({ level, ...where, text: format(...args) });
}
process.on("unhandledRejection", (reason) =>
  printed.push({ level: "unhandledRejection", ...where, text: format(reason) }));

const { HttpAgent } = await import("@ag-ui/client");

const job = JSON.parse(await new Promise((resolve) => {
  let text = "";
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (chunk) => { text += chunk; });
  process.stdin.on("end", () => resolve(text));
}));

let loseNext = false;
async function fetchLosingResponses(url, init) {
  const response = await fetch(url, init);
  if (!loseNext) return response;
  loseNext = false;
  await response.text(); // the server finished the run; only its answer is lost
  throw new TypeError("fetch failed (simulated: the response was lost on the way back)");
}

const agent = new HttpAgent({
  url: job.url, threadId: job.threadId, headers: job.headers ?? {}, fetch: fetchLosingResponses,
});

function describeError(error) {
  return { name: error?.name ?? null, message: String(error?.message ?? error) };
}

async function attempt(params) {
  const seen = { events: [], finished: null, runError: null, failed: null, rejected: null,
                 result: null, timedOut: false };
  const subscriber = {
    onEvent: ({ event }) => { seen.events.push(structuredClone(event)); },
    onRunFinishedEvent: ({ event, outcome, result, interrupts, pendingToolCallIds }) => {
      seen.finished = { outcome, result: result ?? null, interrupts: interrupts ?? null,
                        pendingToolCallIds: pendingToolCallIds ?? null,
                        metadata: event.metadata ?? null };
    },
    onRunErrorEvent: ({ event }) => {
      seen.runError = { message: event.message, code: event.code ?? null };
    },
    onRunFailed: ({ error }) => { seen.failed = describeError(error); },
  };
  let timer;
  const timeout = new Promise((resolve) => {
    timer = setTimeout(() => resolve("timeout"), job.stepTimeoutMs ?? 30000);
  });
  try {
    const outcome = await Promise.race([agent.runAgent(params, subscriber), timeout]);
    if (outcome === "timeout") {
      seen.timedOut = true;
      agent.abortRun();
    } else {
      seen.result = outcome?.result ?? null;
    }
  } catch (error) {
    seen.rejected = describeError(error);
  } finally {
    clearTimeout(timer);
  }
  return seen;
}

const steps = [];
for (const [n, step] of job.steps.entries()) {
  const runId = step.runId ?? `run-${randomUUID()}`;
  const params = { runId, ...(step.resume !== undefined && { resume: step.resume }) };
  if (step.message !== undefined) {
    agent.addMessage({ id: `user-${randomUUID()}`, role: "user", content: step.message });
  }
  const attempts = [];
  loseNext = !!step.loseResponse;
  for (let a = 0; a < (step.loseResponse ? 2 : 1); a++) {
    where = { step: n, attempt: a };
    attempts.push(await attempt(params));
    if (attempts.at(-1).timedOut) break;
  }
  where = { step: null, attempt: null };
  steps.push({ runId, attempts, pendingInterrupts: structuredClone(agent.pendingInterrupts) });
  if (attempts.at(-1).timedOut) break; // the agent may still be running: stop here
}

const result = { steps, messages: structuredClone(agent.messages), console: printed };
process.stdout.write(JSON.stringify(result), () => process.exit(0));
