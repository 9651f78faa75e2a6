package dev.claimd.client;

import java.util.ResourceBundle;

/** Quiet is a System.Logger that drops everything: tests check answers, not logs. */
final class Quiet implements System.Logger {
  static final Quiet LOGGER = new Quiet();

  @Override
  public String getName() {
    return "quiet";
  }

  @Override
  public boolean isLoggable(Level level) {
    return false;
  }

  @Override
  public void log(Level level, ResourceBundle bundle, String msg, Throwable thrown) {}

  @Override
  public void log(Level level, ResourceBundle bundle, String format, Object... params) {}
}
