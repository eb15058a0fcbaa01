// Compiled (not run) by `npm test`: the published types take the README's
// uses, and refuse a few mistakes (each @ts-expect-error must be an error).
import { Client, Failure, Release, TaskhosterError, Worker, type Outcome, type View } from "@taskhoster/client";

interface Resize {
  url: string;
  width: number;
}

export async function producer(client: Client): Promise<View> {
  const { id, created } = await client.post("resize", { url: "u", width: 1 }, { delaySeconds: 5, priority: 2, key: "k" });
  void created;
  const ids: string[] = await client.postBatch("resize", [{ url: "u" }], { notBefore: new Date() });
  void ids;
  // @ts-expect-error a batch takes no idempotency key
  await client.postBatch("resize", [], { key: "k" });
  for await (const view of client.watch("resize", id)) if (view.status === "finished") return view;
  const ack = await client.cancel("resize", id);
  if (!ack.accepted) throw new TaskhosterError(409, "x", "y");
  return client.status("resize", id);
}

export function worker(client: Client): Promise<void> {
  const w = new Worker<Resize>({
    client,
    queue: "resize",
    concurrency: 2,
    onOutcome: (o: Outcome<Resize>) => void o.ack.accepted,
    handler: async (task, signal) => {
      const width: number = task.item.width;
      // @ts-expect-error an item has only the fields of its type
      void task.item.height;
      if (signal.aborted) throw new Release({ delaySeconds: 1, reason: { width } });
      if (!(await task.progress({ percent: 1 }))) throw new Failure("gone");
      return { url: task.item.url };
    },
  });
  return w.run(AbortSignal.timeout(1000));
}
