/**
 * deskgrid: isolated Linux desktops for computer-use agents, from TypeScript.
 *
 * ```ts
 * import { Deskgrid } from '@deskgrid/sdk';
 * const dg = new Deskgrid();            // DESKGRID_URL, DESKGRID_API_KEY
 * await using s = await dg.sessions.create({ width: 1024, height: 768 });
 * await s.click(100, 200);
 * const png = await s.screenshot();
 * ```
 * @module
 */
export * from './client.js';
export * from './errors.js';
export * as actions from './actions.js';
export type { Action, Button } from './actions.js';
export type { components, paths, operations } from './openapi.js';
export { Transport, type CallOptions, type Query, type TransportOptions } from './http.js';
