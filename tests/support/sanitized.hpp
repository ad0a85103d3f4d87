// Whether this test executable was built with a sanitizer. Tests that make millions of
// decisions only to reach a scale run at a tenth of it there (the unsanitized build still checks
// the full scale): the sanitizers' job is the memory and thread errors of the same code paths.
#pragma once

namespace rltest {

// g++ says __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__, clang __has_feature.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool address_sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool address_sanitized = true;
#else
inline constexpr bool address_sanitized = false;
#endif
#else
inline constexpr bool address_sanitized = false;
#endif

#if defined(__SANITIZE_THREAD__)
inline constexpr bool thread_sanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool thread_sanitized = true;
#else
inline constexpr bool thread_sanitized = false;
#endif
#else
inline constexpr bool thread_sanitized = false;
#endif

/// Built with AddressSanitizer or ThreadSanitizer.
inline constexpr bool sanitized = address_sanitized || thread_sanitized;

}  // namespace rltest
