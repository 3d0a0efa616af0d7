/**
 * The consumption area's public face: nothing of it is used by other areas yet (its routes are registered by the app).
 */
export { consumptionRoutes } from './routes.ts';
