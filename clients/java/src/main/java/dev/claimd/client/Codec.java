package dev.claimd.client;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.lang.reflect.Type;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Map;
import java.util.TreeMap;

/**
 * Codec turns a guarded function's value into the bytes claimd stores with
 * SETTLED, and the stored bytes back into the value a duplicate returns
 * ({@link ClaimdClient#idempotent}). {@code encode} must be deterministic; what
 * it throws becomes a {@link ResultNotStorableException}.
 *
 * @param <T> the function's value
 */
public interface Codec<T> {
  /** encode is the value's stored bytes. */
  byte[] encode(T value) throws Exception;

  /** decode is the value stored as {@code stored}. */
  T decode(byte[] stored) throws Exception;

  /**
   * json is the default codec of {@code type}: the guards' result rule ({@link
   * Results#encode}: bytes as they are, a string as UTF-8, null as empty,
   * anything else as compact JSON by the client's Gson), decoded back as {@code
   * type} (a {@code String} as its text, {@code byte[]} as the bytes, empty as
   * null). Records, beans, maps and lists need nothing more; for other types
   * (java.time, BigDecimal as text) use {@link #json(Type, Gson)}.
   */
  static <T> Codec<T> json(Class<T> type) {
    return json(type, new GsonBuilder().serializeNulls().disableHtmlEscaping().create());
  }

  /**
   * json is a codec of {@code type} by the caller's Gson: its type adapters are
   * the encoder and decoder hooks (register one for {@code Instant}, {@code
   * BigDecimal}, a class of your own). Bytes and strings follow the result rule
   * whatever the Gson.
   */
  @SuppressWarnings("unchecked")
  static <T> Codec<T> json(Type type, Gson gson) {
    return new Codec<>() {
      @Override
      public byte[] encode(T value) {
        if (value == null || value instanceof byte[] || value instanceof CharSequence) {
          return Results.encode(value);
        }
        return Results.encode(gson.toJsonTree(value));
      }

      @Override
      public T decode(byte[] stored) {
        if (type == byte[].class) {
          return (T) stored;
        }
        if (type == String.class) {
          return (T) new String(stored, StandardCharsets.UTF_8);
        }
        if (stored.length == 0) {
          return null;
        }
        return gson.fromJson(new String(stored, StandardCharsets.UTF_8), type);
      }
    };
  }

  /**
   * payloadDigest is a {@code payload_sha256} for the part of an event that a
   * duplicate must repeat (Python's {@code payload=}, Go's PayloadDigest): the
   * SHA-256 of its canonical JSON (object keys sorted, compact). A retry whose
   * other fields changed is still a DUPLICATE; one that changed this part is
   * PAYLOAD_MISMATCH.
   */
  static byte[] payloadDigest(Object part) {
    Gson gson = new GsonBuilder().serializeNulls().disableHtmlEscaping().create();
    byte[] canonical = part instanceof byte[] b ? b : Results.encode(sorted(gson.toJsonTree(part)));
    try {
      return MessageDigest.getInstance("SHA-256").digest(canonical);
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is part of every Java runtime", e);
    }
  }

  private static JsonElement sorted(JsonElement e) {
    if (e.isJsonObject()) {
      TreeMap<String, JsonElement> keys = new TreeMap<>();
      for (Map.Entry<String, JsonElement> f : e.getAsJsonObject().entrySet()) {
        keys.put(f.getKey(), sorted(f.getValue()));
      }
      JsonObject out = new JsonObject();
      keys.forEach(out::add);
      return out;
    }
    if (e.isJsonArray()) {
      com.google.gson.JsonArray out = new com.google.gson.JsonArray();
      e.getAsJsonArray().forEach(v -> out.add(sorted(v)));
      return out;
    }
    return e;
  }
}
