// Talking to the TensorBoard page that holds the tab's iframe.
//
// TensorBoard's plugin host (its "experimental" plugin API) waits for the
// iframe to post "experimental.bootstrap" with a MessagePort, then sends
// JSON messages {type, id, payload, isReply} on that port and expects a
// reply to each.  "experimental.DataReloaded" arrives after every reload
// (the reload button and the auto-reload timer): the tab refetches then.

const DATA_RELOADED = 'experimental.DataReloaded';
const RUNS_CHANGED = 'experimental.RunsChanged';

/**
 * Connect to TensorBoard's plugin host; onReload() is called on every
 * DataReloaded or RunsChanged message.  Returns false outside an iframe.
 */
export function connectToHost(onReload) {
  if (window.parent === window) return false;
  const channel = new MessageChannel();
  const port = channel.port1;
  port.addEventListener('message', (event) => {
    let message;
    try {
      message = JSON.parse(event.data);
    } catch (error) {
      return;
    }
    if (!message || message.isReply) return;
    document.documentElement.dataset.host = 'connected';
    if (message.type === DATA_RELOADED || message.type === RUNS_CHANGED) onReload(message.type);
    port.postMessage(JSON.stringify({
      type: message.type, id: message.id, payload: null, error: null, isReply: true,
    }));
  });
  port.start();
  window.parent.postMessage('experimental.bootstrap', '*', [channel.port2]);
  return true;
}
