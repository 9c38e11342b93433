// Builders for the computer-use actions of POST /v1/sessions/{id}/actions:
//
//   await s.act([actions.click(100, 200), actions.type('hello'), actions.key('Return')]);

import type { components } from './openapi.js';

/** One action, as the API takes it. */
export type Action = components['schemas']['v1Action'];
export type Button = 'left' | 'middle' | 'right' | 'back' | 'forward';
type MouseButton = components['schemas']['v1MouseButton'];

const button = (b: Button = 'left'): MouseButton => `MOUSE_BUTTON_${b.toUpperCase()}` as MouseButton;

/** Moves the pointer to (x, y). */
export const mouseMove = (x: number, y: number): Action => ({ mouseMove: { to: { x, y } } });

/** Clicks `button` `clicks` times at (x, y), holding `holdKeys` meanwhile. */
export const click = (x: number, y: number, o: { button?: Button; clicks?: number; holdKeys?: string[] } = {}): Action => ({
  click: { at: { x, y }, button: button(o.button), clicks: o.clicks ?? 1, ...(o.holdKeys ? { holdKeys: o.holdKeys } : {}) },
});

export const doubleClick = (x: number, y: number): Action => click(x, y, { clicks: 2 });
export const rightClick = (x: number, y: number): Action => click(x, y, { button: 'right' });

/** Presses the left button at the first point, moves through the others, releases at the last. */
export const drag = (path: Array<[number, number]>): Action => ({ drag: { path: path.map(([x, y]) => ({ x, y })) } });

/** Presses (down) or releases a mouse button where the pointer is. */
export const buttonPress = (b: Button, down: boolean): Action => ({ button: { button: button(b), down } });

/** Turns the wheel at (x, y): dy > 0 scrolls down, dx > 0 right. */
export const scroll = (x: number, y: number, dy: number, dx = 0, holdKeys?: string[]): Action => ({
  scroll: { at: { x, y }, deltaY: dy, deltaX: dx, ...(holdKeys ? { holdKeys } : {}) },
});

/** Presses a chord such as "ctrl+shift+t" or "Return"; `hold` keeps it down (e.g. "0.5s"). */
export const key = (chord: string, hold?: string): Action => ({ key: { chord, ...(hold ? { hold } : {}) } });

/** Types text, any Unicode. */
export const type = (text: string): Action => ({ type: { text } });

/** Waits between other actions. */
export const wait = (seconds: number): Action => ({ wait: { duration: `${seconds}s` } });

/** An image of a region (in the reply's `images`), scaled to `size` when given. */
export const zoom = (region: { x: number; y: number; width: number; height: number }, size?: { width: number; height: number }): Action => ({
  zoom: { region, ...(size ? { size } : {}) },
});

/** Asks where the pointer is (the reply's `cursor`). */
export const cursorPosition = (): Action => ({ cursorPosition: {} });
