// A computer-use loop skeleton: screenshot -> model -> actions, until the
// model says it is done. Plug your model client into `decide`.
//
//   (in a folder set up as quickstart.ts says)
//   npx tsc --module nodenext --target es2022 agent_loop.ts && node agent_loop.js
//
// `decide` gets the task, the screen (PNG bytes) and the steps so far, and
// returns the actions to perform next, or null when the task is finished.
// The one here is scripted so the example runs without a model.
import { actions, Deskgrid, type Action, type Session } from '@deskgrid/sdk';

type Decide = (task: string, png: Uint8Array, steps: string[]) => Promise<Action[] | null>;

function scripted(s: Session): Decide {
  return async (_task, _png, steps) => {
    // A real model client would send the task and the screenshot to the
    // model here and turn its tool calls into actions.
    if (steps.length === 0) return [actions.click(100, 100), actions.type('hello')];
    if (steps.length === 1) {
      await s.shell('echo done > result.txt'); // a tool besides the computer
      return [actions.key('Return')];
    }
    return null;
  };
}

export async function run(dg: Deskgrid, task: string, maxSteps = 10, decide?: Decide): Promise<string[]> {
  await using s = await dg.sessions.create({ width: 1024, height: 768 });
  decide ??= scripted(s);
  const steps: string[] = [];
  let png = await s.screenshot();
  for (let i = 0; i < maxSteps; i++) {
    const todo = await decide(task, png, steps);
    if (!todo) break;
    // Perform the actions and get the next screen in one call.
    const r = await s.act(todo, { screenshot: true });
    png = Uint8Array.from(atob(r.screenshot?.data ?? ''), (c) => c.charCodeAt(0));
    steps.push(todo.map((a) => Object.keys(a)[0]).join(', '));
  }
  steps.push(`result: ${(await s.files.readText('result.txt')).trim()}`);
  return steps;
}

const steps = await run(new Deskgrid(), "write 'done' to result.txt");
steps.forEach((step, i) => console.log(`step ${i + 1}: ${step}`));
