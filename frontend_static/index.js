// GradLens tab entry module. TensorBoard imports this file into the plugin
// iframe (base href plugin/gradlens/) and calls render().
// All user-controlled strings are set with textContent, never as HTML.

export async function render() {
  const root = document.createElement('div');
  root.className = 'gradlens';
  document.body.appendChild(root);
  const title = document.createElement('h2');
  title.textContent = 'GradLens';
  root.appendChild(title);
  const status = document.createElement('p');
  status.textContent = 'Loading…';
  root.appendChild(status);
  try {
    const response = await fetch('./runs');
    if (!response.ok) throw new Error(`${response.status} ${await response.text()}`);
    const data = await response.json();
    status.textContent = data.runs.length
      ? `${data.runs.length} run(s) with gradlens data`
      : 'No gradlens data yet: log with tb_gradlens.summary.gradients(...) or GradLensCallback.';
    const list = document.createElement('ul');
    for (const run of data.runs) {
      const item = document.createElement('li');
      item.className = 'gradlens-run';
      item.textContent = `${run.run} (${run.tags.length} tags)`;
      list.appendChild(item);
    }
    root.appendChild(list);
  } catch (error) {
    status.textContent = `Error: ${error.message}`;
  }
}
